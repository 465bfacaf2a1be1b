"""Queueing the portal's Celery tasks once the caller's transaction commits.

The services name the tasks instead of importing them: `portal.tasks` calls these services,
so an import back would close a circle. `PortalConfig.ready` imports `portal.tasks`, so every
process that runs Django has them registered (the worker also finds them by autodiscovery),
and an eager Celery (the tests) runs them in place, as it did when they were imported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import transaction

from kiln.celery import app
from portal.models import Environment

PROVISION_TASK = "portal.provision_environment"
TEARDOWN_TASK = "portal.teardown_environment"
REAP_TASK = "portal.reap_expired"
NOTIFY_TASK = "portal.send_notification"
SLEEP_TASK = "portal.sleep_environment"
WAKE_TASK = "portal.wake_environment"


# Set inside `tasks_held()`: where queued tasks go instead of the broker.
_HELD: ContextVar[list[tuple[str, int]] | None] = ContextVar("portal_tasks_held", default=None)


@contextmanager
def tasks_held() -> Iterator[list[tuple[str, int]]]:
    """Within the block, tasks the services queue are collected as (task, id), not sent.

    For a command that is itself the worker (the fault matrix, the lifecycle demo): it runs the
    steps the tasks would, in processes it controls, and nothing else picks them up.
    """
    held: list[tuple[str, int]] = []
    token = _HELD.set(held)
    try:
        yield held
    finally:
        _HELD.reset(token)


def _send(task: str, object_id: int, countdown: float = 0) -> None:
    held = _HELD.get()
    if held is not None:
        held.append((task, object_id))
        return
    app.tasks[task].apply_async((object_id,), countdown=countdown or None)


def _enqueue_on_commit(*, task: str, environment: Environment, countdown: float) -> None:
    env_id = environment.pk
    transaction.on_commit(lambda: _send(task, env_id, countdown))


def enqueue_provisioning(*, environment: Environment, countdown: float = 0) -> None:
    """Queue the provisioning task once the surrounding transaction commits."""
    _enqueue_on_commit(task=PROVISION_TASK, environment=environment, countdown=countdown)


def enqueue_teardown(*, environment: Environment, countdown: float = 0) -> None:
    """Queue the teardown task once the surrounding transaction commits."""
    _enqueue_on_commit(task=TEARDOWN_TASK, environment=environment, countdown=countdown)


def enqueue_notification(*, notification_id: int) -> None:
    """Queue the webhook post of a notification once the surrounding transaction commits."""
    transaction.on_commit(lambda: _send(NOTIFY_TASK, notification_id))


def enqueue_sleep(*, environment: Environment) -> None:
    """Queue the sleep pipeline's task once the surrounding transaction commits."""
    _enqueue_on_commit(task=SLEEP_TASK, environment=environment, countdown=0)


def enqueue_wake(*, environment: Environment) -> None:
    """Queue the wake pipeline's task once the surrounding transaction commits."""
    _enqueue_on_commit(task=WAKE_TASK, environment=environment, countdown=0)


def enqueue_again(*, tasks: Iterable[tuple[str, Iterable[Environment]]]) -> None:
    """Queue each (task, environments) pair's task again for each of its environments (stalled
    work a reaper's pass resumes), all sent once one transaction commits."""
    with transaction.atomic():
        for task, environments in tasks:
            for environment in environments:
                _enqueue_on_commit(task=task, environment=environment, countdown=0)
