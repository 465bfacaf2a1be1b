"""A task's own next run (a re-check, a retry) is published through a broker restart
(kiln/worker_db.py, REQUEUE_RETRY_POLICY); Celery's default policy gives up within 0.6 s, and
the load test's Redis restart lost a teardown re-check so."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from celery import Celery
from django.conf import settings
from kombu.exceptions import OperationalError
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from audit.tasks import relay_outbox
from bench.loadtest.faults import OwnServers
from kiln import observability
from kiln.worker_db import REQUEUE_RETRY_POLICY, send_keeping_no_result
from tests.kiln.standalone_process import free_port

DOWN_SECONDS = 3.0  # longer than the default policy's 0.6 s, far below the requeue policy's


@pytest.fixture
def broker(tmp_path):
    """A throwaway Redis and a Celery app sending to it as Kiln's does (its transport, its
    pool of producers, one connection already made)."""
    servers = OwnServers(redis_port=free_port(), directory=tmp_path / "redis")
    servers.start()
    # Not the current app: Kiln's tasks must keep sending through Kiln's own after this test.
    app = Celery("requeue-test", broker=servers.environment()["REDIS_URL"], set_as_current=False)
    app.conf.broker_transport = settings.CELERY_BROKER_TRANSPORT
    app.send_task("celery.accumulate", args=["first"])
    yield servers, app
    app.close()
    servers.stop()


def _publish_while_down(servers: OwnServers, app: Celery, **options: object) -> None:
    """Stop the broker, publish a countdown message while it is down and start the broker
    again after DOWN_SECONDS (from another thread): raises what the publish raised."""
    servers.stop()

    def come_back() -> None:
        time.sleep(DOWN_SECONDS)
        servers.start()

    back = threading.Thread(target=come_back)
    back.start()
    try:
        # A bare Celery app's publish: guarded as Kiln's are, so that a failed one leaves no span
        # current for the tests that follow in this process.
        with observability.publishing():
            app.send_task("celery.accumulate", args=["again"], countdown=5, **options)
    finally:
        back.join()


def _queued(servers: OwnServers) -> int:
    client = redis.Redis.from_url(servers.environment()["REDIS_URL"])
    try:
        return int(client.llen("celery"))
    finally:
        client.close()


def test_a_requeue_is_published_once_the_broker_is_back(broker):
    servers, app = broker
    started = time.monotonic()
    _publish_while_down(servers, app, retry_policy=REQUEUE_RETRY_POLICY)
    assert time.monotonic() - started >= DOWN_SECONDS - 0.5  # it waited for the broker
    assert _queued(servers) == 1  # the restarted server starts empty: this is the requeue


def test_celerys_default_policy_gives_up_while_the_broker_is_down(broker):
    servers, app = broker
    with pytest.raises(OperationalError):
        _publish_while_down(servers, app)
    assert _queued(servers) == 0


@pytest.mark.parametrize("how", ["Task.apply_async", "send_keeping_no_result"])
def test_a_publish_that_fails_leaves_the_callers_trace_context_as_it_was(how):
    """Celery's instrumentation makes its publish span current before sending and takes it off
    only after: without the guard, a publish that raised left it current in the thread, and the
    thread's next spans (a worker's next tasks, the next request served) became its children.
    Both ways Kiln publishes, to a broker address nothing listens on."""
    app = Celery("down", broker=f"redis://127.0.0.1:{free_port()}/0", set_as_current=False)
    app.conf.broker_transport = settings.CELERY_BROKER_TRANSPORT
    # One try to connect: the test is about the failure, not about waiting for it.
    app.conf.broker_transport_options = {"max_retries": 1, "interval_start": 0, "interval_max": 0}
    try:
        with observability.tracer("tests").start_as_current_span("caller") as caller:
            with pytest.raises(OperationalError):
                if how == "Task.apply_async":  # a Kiln task, sent over the dead broker
                    with app.connection_for_write() as down:
                        relay_outbox.apply_async(retry=False, connection=down)
                else:
                    send_keeping_no_result(app, "celery.accumulate", retry=False)
            assert trace.get_current_span() is caller
    finally:
        app.close()
    (publish,) = [
        s
        for s in observability.finished_spans()
        if s.name.startswith("apply_async/")
        and s.parent is not None
        and s.parent.span_id == caller.get_span_context().span_id
    ]
    assert publish.status.status_code is StatusCode.ERROR
