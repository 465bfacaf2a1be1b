"""The chaos Celery tasks answer to their names, and to the names they had inside canary."""

from __future__ import annotations

import inspect

import pytest

from canary.chaos.services import CONTROLLER_TASK
from kiln.celery import app

NAMES = {
    "chaos.tasks.chaos_reap": "canary.chaos_tasks.chaos_reap",
    "chaos.tasks.chaos_run_controller": "canary.chaos_tasks.chaos_run_controller",
}


@pytest.mark.parametrize(("name", "former"), sorted(NAMES.items()), ids=sorted(NAMES))
def test_a_message_queued_under_the_former_name_runs_the_same_task(name, former):
    task, legacy = app.tasks[name], app.tasks[former]
    # One function, two registrations: each registration wraps it in its own retry wrapper
    # (kiln.worker_db.Task's autoretry), so the functions beneath the wrappers are compared.
    assert inspect.unwrap(legacy.run) is inspect.unwrap(task.run)
    assert (legacy.acks_late, legacy.ignore_result, legacy.autoretry_for) == (
        task.acks_late, task.ignore_result, task.autoretry_for
    )


def test_the_services_queue_a_registered_controller_task(settings):
    # Queued by name: a name that no module registers would be logged and dropped.
    assert CONTROLLER_TASK in app.tasks
    assert app.tasks[CONTROLLER_TASK].acks_late
    assert settings.CELERY_BEAT_SCHEDULE["chaos-reaper"]["task"] in app.tasks
