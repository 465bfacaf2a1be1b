"""Celery tasks of the audit chain: thin wrappers around services."""

from __future__ import annotations

from celery import shared_task

from audit.relay import RELAY_TASK, release_wake
from audit.services import relay_publish
from audit.topic import TopicUnavailable


@shared_task(
    name=RELAY_TASK,
    autoretry_for=(TopicUnavailable,),
    retry_backoff=1,
    retry_backoff_max=60,
    max_retries=None,
    ignore_result=True,
)
def relay_outbox() -> int:
    """Publish pending outbox rows to the audit topic (retries while Redis is down)."""
    release_wake()
    return relay_publish()
