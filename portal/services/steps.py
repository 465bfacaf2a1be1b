"""Provisioning and teardown steps: recorded once per environment, audited when they complete."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

import audit
from portal.models import Environment, ProvisioningStep
from portal.services.lifecycle import audit_target

PROVISIONING_STEPS = (
    "compose",
    "manifest-policy",
    "apply",
    "tenant-audit-token",
    "tenant-flow-control",
    "ready",
)
TEARDOWN_STEPS = (
    "cordon",
    "delete-workloads",
    "finalizers-cleared",
    "tenant-audit-acknowledged",
    "audit-confirmed",
    "delete-namespace",
)
# Where each step lists on an environment's page: provisioning's, then teardown's from 10.
POSITION = {
    **{name: i for i, name in enumerate(PROVISIONING_STEPS)},
    **{name: 10 + i for i, name in enumerate(TEARDOWN_STEPS)},
}
UNLISTED = 99  # a step name neither pipeline has lists last


def position_of(name: str) -> int:
    """The step's place in the list of an environment's steps."""
    return POSITION.get(name, UNLISTED)


def _insert_if_absent(
    *,
    environment: Environment,
    name: str,
    status: str,
    detail: str = "",
    started_at: datetime,
    finished_at: datetime | None = None,
) -> bool:
    """Insert the step's row unless it exists: True if this call inserted it.

    One statement (INSERT ... ON CONFLICT DO NOTHING RETURNING) instead of a locking read, a
    savepoint, the insert and its release; a concurrent insert of the same step waits for the
    other transaction and then inserts nothing, as the unique constraint had it before.
    """
    ops = connection.ops
    table = ops.quote_name(ProvisioningStep._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (environment_id, name, position, status, attempts, detail,"  # noqa: S608 - the table name is the model's own
            " started_at, finished_at) VALUES (%s, %s, %s, %s, 1, %s, %s, %s)"
            " ON CONFLICT (environment_id, name) DO NOTHING RETURNING id",
            [
                environment.pk,
                name,
                position_of(name),
                status,
                detail,
                ops.adapt_datetimefield_value(started_at),
                ops.adapt_datetimefield_value(finished_at),
            ],
        )
        return cursor.fetchone() is not None


def step_started(*, environment: Environment, name: str) -> None:
    """Mark a step running (a retry increments attempts on the same row)."""
    # No savepoint of its own: inside a caller's transaction a failure here fails the whole of it.
    with transaction.atomic(savepoint=False):
        now = timezone.now()
        if _insert_if_absent(
            environment=environment,
            name=name,
            status=ProvisioningStep.RUNNING,
            started_at=now,
        ):
            return
        step = ProvisioningStep.objects.select_for_update().get(environment=environment, name=name)
        if step.status != ProvisioningStep.DONE:
            step.status = ProvisioningStep.RUNNING
            step.attempts += 1
            step.started_at = step.started_at or now
            step.save()


def step_done(
    *,
    actor: Any,
    environment: Environment,
    name: str,
    detail: str = "",
    data: dict | None = None,
) -> bool:
    """Mark a step done and audit it; False (and nothing written) if it was already done."""
    # No savepoint of its own: inside a caller's transaction a failure here fails the whole of it.
    with transaction.atomic(savepoint=False):
        now = timezone.now()
        # A step done in one go is inserted finished rather than inserted and then updated.
        attempts = 1
        if not _insert_if_absent(
            environment=environment,
            name=name,
            status=ProvisioningStep.DONE,
            detail=detail,
            started_at=now,
            finished_at=now,
        ):
            step = ProvisioningStep.objects.select_for_update().get(
                environment=environment, name=name
            )
            if step.status == ProvisioningStep.DONE:
                return False
            step.status = ProvisioningStep.DONE
            step.detail = detail
            step.started_at = step.started_at or now
            step.finished_at = now
            step.attempts = attempts = max(step.attempts, 1)
            step.save()
        audit.record(
            actor,
            "portal.provisioning_step.completed",
            audit_target(environment),
            {"step": name, "detail": detail, "attempts": attempts, **(data or {})},
        )
    return True


def step_failed(*, environment: Environment, name: str, detail: str) -> None:
    """Mark a step failed (the environment's FAILED transition carries the audit event)."""
    ProvisioningStep.objects.update_or_create(
        environment=environment,
        name=name,
        defaults={
            "position": position_of(name),
            "status": ProvisioningStep.FAILED,
            "detail": detail[:2000],
        },
    )


def is_done(*, environment: Environment, name: str) -> bool:
    """True if the step has completed."""
    return ProvisioningStep.objects.filter(
        environment=environment, name=name, status=ProvisioningStep.DONE
    ).exists()


def step_detail(*, environment: Environment, name: str) -> str:
    """The recorded detail of a step ("" if none)."""
    step = ProvisioningStep.objects.filter(environment=environment, name=name).first()
    return step.detail if step else ""
