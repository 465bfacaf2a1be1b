"""The portal's tasks on the Redis broker: provisioning before teardown (a person waits for
READY), and no results kept."""

from __future__ import annotations

import uuid

import pytest

from kiln.celery import app
from portal import tasks
from tests.support.celery_conf import celery_conf


@pytest.fixture
def queue(settings):
    assert str(app.conf.broker_url).startswith("redis://"), "the production broker is Redis"
    name = f"kiln-test-priority-{uuid.uuid4().hex[:8]}"
    with celery_conf(task_always_eager=False):
        yield name
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


def test_sending_a_portal_task_subscribes_to_no_result(queue, settings):
    """A kept result makes the sender subscribe to the result's channel on Redis, one a task."""
    import redis

    client = redis.Redis.from_url(settings.CELERY_RESULT_BACKEND)
    sent = [
        tasks.provision_environment.apply_async((7,), queue=queue),
        tasks.teardown_environment.apply_async((7,), queue=queue),
    ]
    channels = [f"celery-task-meta-{result.id}" for result in sent]
    assert [n for _, n in client.pubsub_numsub(*channels)] == [0, 0]
    assert tasks.send_notification.ignore_result
