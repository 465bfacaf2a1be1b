"""The one transition service: checks TRANSITIONS, changes status, audits who, why and policy version."""

from __future__ import annotations

from typing import Any

from django.db import transaction

import audit
from kiln import changes
from kiln.errors import Forbidden, IllegalTransition
from kiln.identity.permissions import Actor, can_move_environment
from kiln.observability import tracer
from portal.lifecycle import ARRIVAL_VERB, JOB_MOVES, Status, is_allowed
from portal.models import Environment
from portal.selectors import change_key


def audit_target(environment: Environment) -> str:
    """The audit target string of an environment (its opaque id, stable across renames)."""
    return f"portal.environment:{environment.public_id}"


def environment_update(
    *, actor: Any, environment: Environment, action: str, updates: dict, data: dict
) -> None:
    """Set `updates` on the environment (locked by the caller's transaction), save them and audit
    `portal.environment.<action>` with `data`: a change of its fields that is not a move."""
    for field, value in updates.items():
        setattr(environment, field, value)
    environment.save(update_fields=[*updates, "updated_at"])
    audit.record(actor, f"portal.environment.{action}", audit_target(environment), data)


def environment_transition(
    *,
    actor: Any,
    environment: Environment,
    to: Status | str,
    reason: str = "",
    updates: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    created_in_this_transaction: bool = False,
) -> Environment:
    """Move an environment to `to` if the table allows it; audit the move in the same transaction.

    Raises IllegalTransition (409) otherwise, changing nothing. `updates` are
    other fields set atomically with the status (expires_at, ready_at, ...).
    `created_in_this_transaction`: the caller inserted the row in the transaction it is
    still in, so no other transaction can see it, and a failure fails the whole insert;
    the caller's instance is used as it is, with no row lock and no savepoint.
    """
    target = Status(to)
    if isinstance(actor, Actor) and not can_move_environment(actor, target.value, moves=JOB_MOVES):
        raise Forbidden(f"{actor} may not move an environment to {target.value}")
    if created_in_this_transaction and not transaction.get_connection().in_atomic_block:
        raise RuntimeError("created_in_this_transaction needs the creating transaction open")
    with (
        tracer("kiln.portal").start_as_current_span("portal.environment.transition") as span,
        transaction.atomic(savepoint=not created_in_this_transaction),
    ):
        env = (
            environment
            if created_in_this_transaction
            else Environment.objects.select_for_update(of=("self",))
            .select_related("team")
            .get(pk=environment.pk)
        )
        current = Status(env.status)
        span.set_attribute("kiln.environment", env.public_id)
        span.set_attribute("kiln.transition", f"{current}->{target}")
        if not is_allowed(current, target):
            raise IllegalTransition(
                f"an environment in {current} cannot move to {target}",
                extra={"from": current.value, "to": target.value, "environment": env.public_id},
            )
        env.status = target.value
        env.status_reason = reason
        for field, value in (updates or {}).items():
            setattr(env, field, value)
        env.save(update_fields=["status", "status_reason", "updated_at", *(updates or {})])
        audit.record(
            actor,
            f"portal.environment.{ARRIVAL_VERB[target]}",
            audit_target(env),
            {
                "from": current.value,
                "to": target.value,
                "reason": reason,
                "policy_version": env.policy_version,
                "namespace": env.namespace,
                "team": env.team.slug,
                **(data or {}),
            },
        )
        changes.notify_after_commit(change_key(env))
    environment.__dict__.update({k: v for k, v in env.__dict__.items() if not k.startswith("_")})
    return environment
