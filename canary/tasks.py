"""Rollout Celery tasks: thin, take ids, call one service, idempotent per tick number."""

from __future__ import annotations

from celery import shared_task

from canary import services
from canary.services.freeze import rollouts_freeze_sync as rollouts_freeze_sync_service


@shared_task(name="canary.tasks.rollout_tick_task", ignore_result=True, acks_late=True)
def rollout_tick_task(rollout_id: str, tick: int) -> str:
    """Analyse one tick of one rollout (a repeated or stale tick is a no-op)."""
    return services.rollout_tick(rollout_id=rollout_id, tick=tick)


@shared_task(name="canary.tasks.rollouts_tick_due", ignore_result=True)
def rollouts_tick_due() -> int:
    """Beat task: enqueue the due tick of every active rollout, so a killed worker loses nothing."""
    return services.rollouts_tick_due()


@shared_task(name="canary.tasks.rollouts_freeze_sync", ignore_result=True)
def rollouts_freeze_sync() -> int:
    """Beat task: renew the freezes of the running rollouts' canary nodes, release the others."""
    return rollouts_freeze_sync_service()
