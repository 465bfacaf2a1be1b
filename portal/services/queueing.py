"""Queueing the portal's Celery tasks once the caller's transaction commits.

The services name the tasks instead of importing them: `portal.tasks` calls these services,
so an import back would close a circle. `PortalConfig.ready` imports `portal.tasks`, so every
process that runs Django has them registered (the worker also finds them by autodiscovery),
and an eager Celery (the tests) runs them in place, as it did when they were imported here.
"""

from __future__ import annotations

from django.db import transaction

from kiln.celery import app
from portal.models import Environment

PROVISION_TASK = "portal.provision_environment"
TEARDOWN_TASK = "portal.teardown_environment"
REAP_TASK = "portal.reap_expired"
NOTIFY_TASK = "portal.send_notification"


def _enqueue_on_commit(*, task: str, environment: Environment, countdown: float) -> None:
    env_id = environment.pk
    transaction.on_commit(
        lambda: app.tasks[task].apply_async((env_id,), countdown=countdown or None)
    )


def enqueue_provisioning(*, environment: Environment, countdown: float = 0) -> None:
    """Queue the provisioning task once the surrounding transaction commits."""
    _enqueue_on_commit(task=PROVISION_TASK, environment=environment, countdown=countdown)


def enqueue_teardown(*, environment: Environment, countdown: float = 0) -> None:
    """Queue the teardown task once the surrounding transaction commits."""
    _enqueue_on_commit(task=TEARDOWN_TASK, environment=environment, countdown=countdown)


def enqueue_notification(*, notification_id: int) -> None:
    """Queue the webhook post of a notification once the surrounding transaction commits."""
    transaction.on_commit(lambda: app.tasks[NOTIFY_TASK].apply_async((notification_id,)))
