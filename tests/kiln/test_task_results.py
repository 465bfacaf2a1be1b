"""Tasks that keep no result are sent without Celery's per-thread result backend
(kiln/worker_db.py, Task.AsyncResult). Under ASGI each request is a thread of its own, so a
send that made the thread's backend made a new Redis result backend on every request."""

from __future__ import annotations

import secrets
import threading

import pytest
from celery.backends.base import DisabledBackend

from audit.chain import relay
from kiln.celery import app
from kiln.worker_db import send_keeping_no_result
from portal.services.queueing import PROVISION_TASK, REAP_TASK, TEARDOWN_TASK


def _in_a_new_thread(send) -> tuple[object, bool]:
    """Run send() in a thread of its own, as a request under ASGI; (what it returned, whether
    the thread then had a result backend of its own)."""
    out: dict[str, object] = {}

    def run() -> None:
        out["sent"] = send()
        out["backend"] = "backend" in vars(app._local)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    return out["sent"], bool(out["backend"])


@pytest.fixture
def queue(settings):
    """A queue of this test's own on the broker, removed afterwards."""
    name = f"kiln-test-results-{secrets.token_hex(4)}"
    yield name
    with app.connection_for_write() as connection:
        connection.default_channel.queue_delete(name)


@pytest.mark.parametrize("task", [PROVISION_TASK, TEARDOWN_TASK])
def test_a_task_keeping_no_result_is_sent_without_a_result_backend(task, queue):
    assert app.tasks[task].ignore_result
    sent, made_backend = _in_a_new_thread(lambda: app.tasks[task].apply_async((0,), queue=queue))
    assert not made_backend
    assert isinstance(sent.backend, DisabledBackend) and sent.ignored


def test_a_task_keeping_its_result_still_has_the_backend(queue):
    assert not app.tasks[REAP_TASK].ignore_result
    sent, made_backend = _in_a_new_thread(lambda: app.tasks[REAP_TASK].apply_async(queue=queue))
    assert made_backend and not isinstance(sent.backend, DisabledBackend)


def test_the_relay_wake_up_makes_no_result_backend(settings, monkeypatch, queue):
    settings.KILN_AUDIT_RELAY_ON_COMMIT = True
    monkeypatch.setattr(relay, "_claim_wake", lambda: True)
    # Sent as wake() sends it, to this test's queue.
    monkeypatch.setattr(
        relay,
        "send_keeping_no_result",
        lambda *args, **options: send_keeping_no_result(*args, queue=queue, **options),
    )
    _, made_backend = _in_a_new_thread(relay.wake)
    assert not made_backend
    with app.connection_for_write() as connection:  # and the wake-up was sent
        assert connection.default_channel.queue_declare(queue, passive=True).message_count == 1
