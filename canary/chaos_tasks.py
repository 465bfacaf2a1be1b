"""Chaos Celery tasks: thin, take ids, call one service. Loaded through CELERY_IMPORTS."""

from __future__ import annotations

from celery import shared_task

from canary import chaos_controller, chaos_reaper


@shared_task(name="canary.chaos_tasks.chaos_reap", ignore_result=True)
def chaos_reap() -> dict:
    """Beat task: revert every fault whose lease lapsed (idempotent)."""
    return chaos_reaper.chaos_reap().as_dict()


@shared_task(name="canary.chaos_tasks.chaos_run_controller", ignore_result=True, acks_late=True)
def chaos_run_controller(experiment_id: str) -> str:
    """Hold one experiment's lease until it ends; a redelivery after a crash takes the lease over."""
    return chaos_controller.chaos_controller_run(
        experiment_id=experiment_id, holder=chaos_controller.controller_identity("celery")
    )
