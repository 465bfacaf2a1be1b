"""Celery tasks of the portal: thin, take ids, idempotent, own the retry policy."""

from __future__ import annotations

import logging

from celery import shared_task

from portal import conf
from portal.delivery import DeliveryError

log = logging.getLogger("kiln.portal.tasks")
MAX_DELIVERY_RETRIES = 8


def backoff(retries: int) -> float:
    """Seconds before retry n: 0.5, 1, 2, 4 ... capped at 30."""
    return min(0.5 * (2**retries), 30.0)


def poll_delay(polls: int) -> float:
    """Seconds before readiness check n+1: the poll interval growing by half each time, at most 3 s."""
    return min(conf.poll_seconds() * (1.5**polls), max(conf.poll_seconds(), 3.0))


@shared_task(
    bind=True, acks_late=True, max_retries=MAX_DELIVERY_RETRIES, name="portal.provision_environment"
)
def provision_environment(self, environment_id: int, polls: int = 0) -> str:
    """Advance provisioning; re-queue itself while objects become ready; retry delivery errors with backoff."""
    from portal.services.provisioning import PENDING, environment_mark_failed, environment_provision

    try:
        result = environment_provision(environment_id=environment_id)
    except DeliveryError as exc:
        if exc.retryable and self.request.retries < MAX_DELIVERY_RETRIES:
            raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
        environment_mark_failed(
            environment_id=environment_id, reason=f"delivery failed: {exc.message}", step="apply"
        )
        return "failed"
    if result == PENDING:
        provision_environment.apply_async((environment_id, polls + 1), countdown=poll_delay(polls))
    return result


@shared_task(
    bind=True, acks_late=True, max_retries=MAX_DELIVERY_RETRIES, name="portal.teardown_environment"
)
def teardown_environment(self, environment_id: int, polls: int = 0) -> str:
    """Advance teardown; re-queue itself while finalizers clear (the deadline ends in QUARANTINED)."""
    from portal.services.teardown import PENDING, environment_teardown

    try:
        result = environment_teardown(environment_id=environment_id)
    except DeliveryError as exc:
        if exc.retryable and self.request.retries < MAX_DELIVERY_RETRIES:
            raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
        log.error("teardown of %s: delivery failed for good: %s", environment_id, exc.message)
        raise
    if result == PENDING:
        teardown_environment.apply_async((environment_id, polls + 1), countdown=poll_delay(polls))
    return result


@shared_task(name="portal.reap_expired")
def reap_expired() -> dict:
    """Beat: start teardown of expired environments and resume stalled work."""
    from portal.services.teardown import environments_reap_expired

    return environments_reap_expired(dry_run=False)
