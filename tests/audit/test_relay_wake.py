"""Relay wake-ups: one queued relay task serves every commit made before it starts."""

from __future__ import annotations

import pytest
from django.db import transaction

from audit import record
from audit.models import OutboxEvent
from audit.tasks import relay_outbox
from kiln.celery import app

# Real commits: on_commit hooks run as they do in production.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def wake_ups(settings):
    settings.KILN_AUDIT_RELAY_ON_COMMIT = True
    app.control.purge()  # wake-ups other tests left in this broker database
    yield
    app.control.purge()


def _commit_one(target: str) -> None:
    with transaction.atomic():
        record("alice", "portal.environment.approved", target, {})


def test_a_burst_of_commits_queues_one_relay_task(wake_ups):
    for i in range(5):
        _commit_one(f"env:{i}")
    # Five commits, one message on the broker: the first claimed the wake-up, the rest rode on it.
    assert app.control.purge() == 1


def test_a_commit_after_the_relay_started_queues_a_new_run_that_publishes_it(
    wake_ups,
):
    _commit_one("env:first")
    assert app.control.purge() == 1
    assert relay_outbox.apply().get() == 1  # the queued run starts: releases the claim, publishes
    _commit_one("env:second")
    assert app.control.purge() == 1  # not swallowed by the earlier claim
    assert relay_outbox.apply().get() == 1
    assert OutboxEvent.objects.filter(published_at__isnull=True).count() == 0


def test_without_redis_every_commit_still_wakes_the_relay(wake_ups, settings):
    from audit.chain import relay

    settings.REDIS_URL = None  # no claim store: never suppress a wake-up
    assert relay._claim_wake() is True
    assert relay._claim_wake() is True
