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
    "drain-nodes",
    "finalizers-cleared",
    "tenant-audit-acknowledged",
    "audit-confirmed",
    "delete-namespace",
)
SLEEP_STEPS = ("sleep-remember", "sleep-workloads", "sleep-capacity")
WAKE_STEPS = ("wake-capacity", "wake-workloads", "wake-ready")
# Where each step lists on an environment's page: provisioning's, then teardown's from 10, the
# last sleep's from 20 and the last wake's from 30.
POSITION = {
    **{name: i for i, name in enumerate(PROVISIONING_STEPS)},
    **{name: 10 + i for i, name in enumerate(TEARDOWN_STEPS)},
    **{name: 20 + i for i, name in enumerate(SLEEP_STEPS)},
    **{name: 30 + i for i, name in enumerate(WAKE_STEPS)},
}
UNLISTED = 99  # a step name neither pipeline has lists last


def position_of(name: str) -> int:
    """The step's place in the list of an environment's steps."""
    return POSITION.get(name, UNLISTED)


# The row of an unfinished step is updated in place; a done step is never written again.
_ON_START = (
    "status = EXCLUDED.status, attempts = {t}.attempts + 1,"
    " started_at = COALESCE({t}.started_at, EXCLUDED.started_at)"
)
_ON_DONE = (
    "status = EXCLUDED.status, detail = EXCLUDED.detail,"
    " started_at = COALESCE({t}.started_at, EXCLUDED.started_at),"
    " finished_at = EXCLUDED.finished_at,"
    " attempts = CASE WHEN {t}.attempts < 1 THEN 1 ELSE {t}.attempts END"
)


def _upsert(
    environment: Environment,
    name: str,
    status: str,
    on_conflict: str,
    *,
    detail: str = "",
    started_at: datetime,
    finished_at: datetime | None = None,
) -> int | None:
    """Insert the step's row, or update it by `on_conflict` unless it is done; returns its
    attempts, or None when it was done already (and nothing was written).

    One statement (INSERT ... ON CONFLICT DO UPDATE ... WHERE status <> done RETURNING) instead
    of an insert, a locking read and an update: the teardown's six steps are each started and
    then done, which took four statements a step. A concurrent write of the same step waits for
    the other transaction, then sees its outcome, as the locking read did.
    """
    ops = connection.ops
    table = ops.quote_name(ProvisioningStep._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (environment_id, name, position, status, attempts,"  # noqa: S608 - the table name is the model's own
            " detail, started_at, finished_at) VALUES (%s, %s, %s, %s, 1, %s, %s, %s)"
            f" ON CONFLICT (environment_id, name) DO UPDATE SET {on_conflict.format(t=table)}"
            f" WHERE {table}.status <> %s RETURNING attempts",
            [
                environment.pk,
                name,
                position_of(name),
                status,
                detail,
                ops.adapt_datetimefield_value(started_at),
                ops.adapt_datetimefield_value(finished_at),
                ProvisioningStep.DONE,
            ],
        )
        row = cursor.fetchone()
        return None if row is None else row[0]


def step_started(*, environment: Environment, name: str) -> None:
    """Mark a step running (a retry increments attempts on the same row; a done step stays done)."""
    _upsert(environment, name, ProvisioningStep.RUNNING, _ON_START, started_at=timezone.now())


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
        attempts = _upsert(
            environment,
            name,
            ProvisioningStep.DONE,
            _ON_DONE,
            detail=detail,
            started_at=now,
            finished_at=now,
        )
        if attempts is None:
            return False
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
