"""Provisioning goes before teardown on the Redis broker: a person waits for READY."""

from __future__ import annotations

import uuid

import pytest

from kiln.celery import app
from portal import tasks


@pytest.fixture
def queue(settings):
    assert str(app.conf.broker_url).startswith("redis://"), "the production broker is Redis"
    name = f"kiln-test-priority-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = False
    yield name
    app.conf.task_always_eager = previous
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(name)


def test_a_provisioning_message_is_read_before_teardowns_queued_earlier(queue):
    for environment_id in (1, 2, 3):
        tasks.teardown_environment.apply_async((environment_id,), queue=queue)
    tasks.provision_environment.apply_async((4,), queue=queue)
    # A re-check of a teardown (the task re-queues itself) keeps the task's priority too.
    tasks.teardown_environment.apply_async((5, 1), queue=queue, countdown=0)
    read = []
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue=queue, no_ack=True)) is not None:
            read.append((message.headers["task"], message.headers["argsrepr"]))
    assert read[0] == (tasks.PROVISION_TASK, "(4,)")
    assert sorted(read[1:]) == sorted(
        [(tasks.TEARDOWN_TASK, r) for r in ("(1,)", "(2,)", "(3,)", "(5, 1)")]
    )
