"""Celery tasks of the audit chain: thin wrappers around services."""

from __future__ import annotations

from celery import shared_task

from audit.chain.relay import RELAY_TASK, release_wake
from audit.chain.topic import TopicUnavailable
from audit.chain.verification import verify_and_store
from audit.services import relay_publish
from audit.services.operations import VERIFY_TASK


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


@shared_task(name=VERIFY_TASK, ignore_result=True)
def verify_chain_now() -> bool:
    """Verify the whole chain and store the outcome (asked for with "Verify now")."""
    return verify_and_store().ok
