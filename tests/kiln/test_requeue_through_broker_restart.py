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

from bench.loadtest.faults import OwnServers
from kiln.worker_db import REQUEUE_RETRY_POLICY
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
