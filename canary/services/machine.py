"""The rollout state machine: the one transition check, and the decision that moves traffic.

`ROLLOUT_TRANSITIONS` (canary.models) is the table; `transition` is the only code that
changes a rollout's status, and `decide` the only code that shifts its traffic: it
moves the status, routes the VirtualService, stores the decision and audits it
(`canary.rollout.<kind>`), inside the caller's transaction. Callers hold the rollout's
row lock (`locked`) and end with `save_and_stream`, which broadcasts the committed state
and schedules the next tick.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from audit import record
from canary.extensions import write_virtual_services
from canary.models import (
    ACTIVE_STATUSES,
    ROLLOUT_TERMINAL_STATUSES,
    ROLLOUT_TRANSITIONS,
    Rollout,
    RolloutDecision,
    RolloutStatus,
    RolloutTick,
)
from canary.ownership import ownership_refusal
from canary.services.stream import after_commit
from canary.traffic import destination_rule, virtual_service
from kiln.cluster.backends import get_backend
from kiln.errors import Forbidden, IllegalTransition
from kiln.identity.permissions import Actor, can_decide_rollout


def locked(rollout: Rollout) -> Rollout:
    """The rollout read again under its row lock, with its service and team."""
    return Rollout.objects.select_for_update().select_related("service__team").get(pk=rollout.pk)


def transition(rollout: Rollout, to: str) -> None:
    """Move the rollout to status `to` if the table allows it; IllegalTransition (409) if not."""
    if to not in ROLLOUT_TRANSITIONS[rollout.status]:
        raise IllegalTransition(
            f"a {rollout.status} rollout cannot become {to}",
            extra={"from": rollout.status, "to": to},
        )
    rollout.status = to
    if to not in ACTIVE_STATUSES:
        rollout.next_tick_at = None
    if to in ROLLOUT_TERMINAL_STATUSES:
        rollout.finished_at = timezone.now()


def route(rollout: Rollout, weight: int, *, subsets: bool = False) -> None:
    """Apply the VirtualService at `weight` (and the DestinationRule's subsets when starting)."""
    service = rollout.service
    manifests = [
        virtual_service(
            name=service.name,
            namespace=service.namespace,
            host=service.host,
            canary_weight=weight,
            rollout_id=str(rollout.pk),
        )
    ]
    if subsets:
        manifests.insert(
            0,
            destination_rule(
                name=service.name,
                namespace=service.namespace,
                host=service.host,
                baseline_version=rollout.baseline_version,
                canary_version=rollout.canary_version,
            ),
        )
    # An injected chaos fault may live in this VirtualService's route: the installed writer
    # keeps it across the re-apply (canary.extensions).
    write_virtual_services(get_backend(), manifests)


def decide(
    rollout: Rollout,
    *,
    actor: Actor,
    kind: str,
    to_weight: int,
    reason: str,
    statistics: dict[str, Any] | None = None,
    to: str | None = None,
) -> RolloutDecision:
    """Record a state-changing decision: move to status `to` (if given), route traffic, store, audit.

    The broadcast follows when the caller saves (`save_and_stream`).
    """
    if to is not None:
        transition(rollout, to)
    if not can_decide_rollout(actor, kind):
        raise Forbidden(f"{actor} may not record a {kind} decision on a rollout")
    from_weight = rollout.weight
    if to_weight != from_weight or kind == "started":
        route(rollout, to_weight, subsets=kind == "started")
    rollout.weight = to_weight
    rollout.reason = reason
    decision = RolloutDecision.objects.create(
        rollout=rollout,
        tick=rollout.ticks_done,
        kind=kind,
        actor=str(actor),
        from_weight=from_weight,
        to_weight=to_weight,
        reason=reason,
        statistics=statistics or {},
    )
    record(
        actor,
        f"canary.rollout.{kind}",
        rollout,
        {
            "tick": rollout.ticks_done,
            "from_weight": from_weight,
            "to_weight": to_weight,
            "status": rollout.status,
            "reason": reason,
            "statistics": statistics or {},
        },
    )
    return decision


def failed_if_not_owned(
    rollout: Rollout, *, actor: Actor, statistics: dict[str, Any] | None = None
) -> bool:
    """Fail the rollout, routing nothing, if its namespace or host is no longer its team's.

    Asked before every move of traffic (start, step, promotion): a namespace can change
    hands between the rollout's creation and any later step. The weight stays as it is,
    so nothing more is written into a namespace that is no longer the team's.
    """
    service = rollout.service
    refusal = ownership_refusal(service.team.slug, service.namespace, service.host)
    if refusal is None:
        return False
    decide(
        rollout,
        to=RolloutStatus.FAILED,
        actor=actor,
        kind="failed",
        to_weight=rollout.weight,
        reason=refusal,
        statistics=statistics,
    )
    return True


def save_and_stream(rollout: Rollout, *, last_tick: RolloutTick | None = None) -> None:
    """Save the rollout; after commit broadcast it and, while active, run its next tick in one tick."""
    if rollout.is_active:
        rollout.next_tick_at = timezone.now() + timedelta(seconds=rollout.tick_seconds)
    rollout.save()
    after_commit(rollout, countdown=rollout.tick_seconds, last_tick=last_tick)
