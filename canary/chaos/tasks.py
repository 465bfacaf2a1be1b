"""Chaos Celery tasks: thin, take ids, call one service. Loaded through CELERY_IMPORTS.

Each task is also registered under the name it had while chaos lived inside canary
(`canary.chaos_tasks.*`), so messages queued before an upgrade still run.
"""

from __future__ import annotations

from celery import shared_task

from canary.chaos import controller, reaper


def _reap() -> dict:
    """Beat task: revert every fault whose lease lapsed (idempotent)."""
    return reaper.chaos_reap().as_dict()


def _run_controller(experiment_id: str) -> str:
    """Hold one experiment's lease until it ends; a redelivery after a crash takes the lease over."""
    return controller.chaos_controller_run(
        experiment_id=experiment_id, holder=controller.controller_identity("celery")
    )


chaos_reap = shared_task(name="chaos.tasks.chaos_reap", ignore_result=True)(_reap)
chaos_run_controller = shared_task(
    name="chaos.tasks.chaos_run_controller", ignore_result=True, acks_late=True
)(_run_controller)

LEGACY_TASKS = (
    shared_task(name="canary.chaos_tasks.chaos_reap", ignore_result=True)(_reap),
    shared_task(name="canary.chaos_tasks.chaos_run_controller", ignore_result=True, acks_late=True)(
        _run_controller
    ),
)
