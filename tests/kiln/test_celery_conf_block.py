"""`tests.support.celery_conf`: a block's broker is the one it publishes to, and afterwards
Celery's configuration and connections are as they were (a memory broker once sent its
messages to Redis database 0, and stayed the process's broker for the tests after it)."""

from __future__ import annotations

import pytest

from kiln.celery import app
from tests.support.celery_conf import celery_conf

pytestmark = pytest.mark.django_db


def _transport() -> str:
    with app.connection_for_write() as conn:
        return conn.transport.driver_type


def test_a_memory_broker_is_used_inside_and_given_back_after(chaos_like_settings):
    before = (app.conf.broker_url, app.conf.broker_transport, _transport())
    with celery_conf(broker_url="memory://localhost/"):
        chaos_like_settings.KILN_CHAOS_AUTORUN = True  # a settings override inside the block
        assert _transport() == "memory"
        assert app.pool.connection.transport.driver_type == "memory"
    assert (app.conf.broker_url, app.conf.broker_transport, _transport()) == before
    assert app.pool.connection.transport.driver_type == before[2]


@pytest.fixture
def chaos_like_settings(settings):
    settings.KILN_CHAOS_AUTORUN = False
    return settings
