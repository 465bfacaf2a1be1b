"""Celery tasks of the portal: thin, take ids, idempotent, own the retry policy.

The tasks sent for environments and notifications keep no result (`ignore_result`): no caller
reads one (the database holds what happened), and a kept result costs the worker a write and a
publish, and on Redis the sender a subscription, for every task. The reaper, run by beat,
keeps its summary of what it did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import shared_task

from kiln.cluster import DeliveryError
from kiln.worker_db import Task
from portal import conf
from portal.services import budgets as services_budgets
from portal.services.notices import NotificationFailed, notification_send
from portal.services.provisioning import (
    PENDING,
    environment_mark_failed,
    environment_provision,
)
from portal.services.queueing import (
    NOTIFY_TASK,
    PROVISION_TASK,
    REAP_TASK,
    SLEEP_TASK,
    TEARDOWN_TASK,
    WAKE_TASK,
)
from portal.services.reaper import environments_reap_expired
from portal.services.sleep import environment_sleep_advance, environment_wake_advance
from portal.services.teardown import environment_teardown

log = logging.getLogger("kiln.portal.tasks")
MAX_DELIVERY_RETRIES = 8
MAX_NOTIFY_RETRIES = 5
# Teardown's messages (its retries and re-checks too) wait behind every other task's: a person
# waits for READY, no one waits for DELETED (the DELETE answers 202 at once). On Redis, kombu
# keeps a list per priority step (0, 3, 6, 9) and reads 0 first; other tasks are sent at 0. A
# teardown held back too long ends in QUARANTINED at its deadline, as a slow cluster's does.
TEARDOWN_PRIORITY = 6


def backoff(retries: int) -> float:
    """Seconds before retry n: 0.5, 1, 2, 4 ... capped at 30."""
    return min(0.5 * (2**retries), 30.0)


def poll_delay(polls: int) -> float:
    """Seconds before readiness check n+1: the poll interval growing by half each time, at most 3 s."""
    return min(conf.poll_seconds() * (1.5**polls), max(conf.poll_seconds(), 3.0))


def _pipeline_task(name: str, **options: Any):
    """The Celery task of a pipeline: bound, acknowledged late (a killed worker's task is run
    again), at most MAX_DELIVERY_RETRIES delivery retries, no result kept."""
    return shared_task(
        bind=True,
        acks_late=True,
        max_retries=MAX_DELIVERY_RETRIES,
        name=name,
        ignore_result=True,
        **options,
    )


def _advance(
    task: Task,
    service: Callable[..., str],
    environment_id: int,
    polls: int,
    give_up: Callable[[DeliveryError], str],
) -> str:
    """One run of a re-entrant service: a retryable delivery error is retried with backoff (at
    most MAX_DELIVERY_RETRIES times, then `give_up` decides), and PENDING re-queues the task."""
    try:
        result = service(environment_id=environment_id)
    except DeliveryError as exc:
        if exc.retryable and task.request.retries < MAX_DELIVERY_RETRIES:
            raise task.retry(exc=exc, countdown=backoff(task.request.retries)) from exc
        return give_up(exc)
    if result == PENDING:
        task.requeue(environment_id, polls + 1, countdown=poll_delay(polls))
    return result


@_pipeline_task(PROVISION_TASK)
def provision_environment(self, environment_id: int, polls: int = 0) -> str:
    """Advance provisioning; re-queue itself while objects become ready; retry delivery errors with backoff."""

    def give_up(exc: DeliveryError) -> str:
        environment_mark_failed(
            environment_id=environment_id, reason=f"delivery failed: {exc.message}", step="apply"
        )
        return "failed"

    return _advance(self, environment_provision, environment_id, polls, give_up)


@_pipeline_task(TEARDOWN_TASK, priority=TEARDOWN_PRIORITY)
def teardown_environment(self, environment_id: int, polls: int = 0) -> str:
    """Advance teardown; re-queue itself while finalizers clear (the deadline ends in QUARANTINED)."""

    def give_up(exc: DeliveryError) -> str:
        log.error("teardown of %s: delivery failed for good: %s", environment_id, exc.message)
        raise exc

    return _advance(self, environment_teardown, environment_id, polls, give_up)


def _stalled(exc: DeliveryError) -> str:
    """A sleep or wake whose delivery failed for good stays where it is; the reaper's pass
    queues it again (a sleeping or waking environment is never failed for a cluster outage)."""
    log.error("sleep or wake: delivery failed for good: %s", exc.message)
    return "stalled"


@_pipeline_task(SLEEP_TASK)
def sleep_environment(self, environment_id: int, polls: int = 0) -> str:
    """Advance the sleep pipeline; retry delivery errors with backoff."""
    return _advance(self, environment_sleep_advance, environment_id, polls, _stalled)


@_pipeline_task(WAKE_TASK)
def wake_environment(self, environment_id: int, polls: int = 0) -> str:
    """Advance the wake pipeline; re-queue itself while objects come back; retry delivery errors."""
    return _advance(self, environment_wake_advance, environment_id, polls, _stalled)


@shared_task(name=REAP_TASK)
def reap_expired() -> dict:
    """Beat: start teardown of expired environments and resume stalled work."""
    return environments_reap_expired(dry_run=False)


@shared_task(name="portal.budgets_enforce")
def budgets_enforce() -> dict:
    """Beat: tell teams of budget thresholds crossed; at the budget, sleep idle environments."""
    return services_budgets.budgets_enforce()


@shared_task(
    bind=True, acks_late=True, max_retries=MAX_NOTIFY_RETRIES, name=NOTIFY_TASK, ignore_result=True
)
def send_notification(self, notification_id: int) -> str:
    """Post a notification to its team's webhook; retry with backoff; the last try marks it failed."""
    final = self.request.retries >= MAX_NOTIFY_RETRIES
    try:
        return notification_send(notification_id=notification_id, final_attempt=final)
    except NotificationFailed as exc:
        raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
