"""Provisioning and teardown steps: recorded once per environment, audited when they complete."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

import audit
from portal.models import Environment, ProvisioningStep
from portal.services.lifecycle import audit_target


def step_started(env: Environment, name: str, position: int) -> ProvisioningStep:
    """Mark a step running (a retry increments attempts on the same row)."""
    with transaction.atomic():
        step, _ = ProvisioningStep.objects.select_for_update().get_or_create(
            environment=env, name=name, defaults={"position": position}
        )
        if step.status != ProvisioningStep.DONE:
            step.status = ProvisioningStep.RUNNING
            step.attempts += 1
            step.started_at = step.started_at or timezone.now()
            step.save()
    return step


def step_done(
    actor: Any,
    env: Environment,
    name: str,
    position: int,
    detail: str = "",
    data: dict | None = None,
) -> bool:
    """Mark a step done and audit it; False (and nothing written) if it was already done."""
    # No savepoint of its own: inside a caller's transaction a failure here fails the whole of it.
    with transaction.atomic(savepoint=False):
        now = timezone.now()
        step = (
            ProvisioningStep.objects.select_for_update().filter(environment=env, name=name).first()
        )
        created = False
        if step is None:  # a step done in one go: insert it finished rather than insert + update
            try:
                with transaction.atomic():
                    step = ProvisioningStep.objects.create(
                        environment=env,
                        name=name,
                        position=position,
                        status=ProvisioningStep.DONE,
                        detail=detail,
                        started_at=now,
                        finished_at=now,
                        attempts=1,
                    )
                created = True
            except IntegrityError:  # inserted concurrently: lock and continue with that row
                step = ProvisioningStep.objects.select_for_update().get(environment=env, name=name)
        if not created:
            if step.status == ProvisioningStep.DONE:
                return False
            step.status = ProvisioningStep.DONE
            step.detail = detail
            step.started_at = step.started_at or now
            step.finished_at = now
            step.attempts = max(step.attempts, 1)
            step.save()
        audit.record(
            actor,
            "portal.provisioning_step.completed",
            audit_target(env),
            {"step": name, "detail": detail, "attempts": step.attempts, **(data or {})},
        )
    return True


def step_failed(env: Environment, name: str, position: int, detail: str) -> None:
    """Mark a step failed (the environment's FAILED transition carries the audit event)."""
    ProvisioningStep.objects.update_or_create(
        environment=env,
        name=name,
        defaults={"position": position, "status": ProvisioningStep.FAILED, "detail": detail[:2000]},
    )


def is_done(env: Environment, name: str) -> bool:
    """True if the step has completed."""
    return ProvisioningStep.objects.filter(
        environment=env, name=name, status=ProvisioningStep.DONE
    ).exists()


def step_detail(env: Environment, name: str) -> str:
    """The recorded detail of a step ("" if none)."""
    step = ProvisioningStep.objects.filter(environment=env, name=name).first()
    return step.detail if step else ""
