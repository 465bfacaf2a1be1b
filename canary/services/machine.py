"""The rollout state machine: the one transition check, and the decision that moves traffic.

`ROLLOUT_TRANSITIONS` (canary.models) is the table; `transition` is the only code that
changes a rollout's status, and `rollout_decision_record` the only code that shifts its
traffic: it moves the status, stores the decision with the route intent it orders
(`routing.route_intent_record`) and audits it (`canary.rollout.<kind>`), inside the
caller's transaction. Callers hold the rollout's row lock (`rollout_locked`), end with
`save_and_stream`, which broadcasts the committed state and schedules the next tick, and
after the commit apply the intent (`routing.rollout_routes_apply`): nothing is written
to the cluster while the row is locked.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from audit import record
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
from canary.services.routing import route_intent_record
from canary.services.stream import after_commit
from kiln.errors import Forbidden, IllegalTransition
from kiln.identity import components as c
from kiln.identity.permissions import Actor, can_decide_rollout

# Which decisions each canary job records (asked by can_decide_rollout); a person's decision is
# checked by the service that makes it, with the person's own predicate.
JOB_DECISIONS: dict[str, frozenset[str]] = {
    c.ROLLOUT_ANALYZE: frozenset(
        {"started", "step_advanced", "promoted", "rolled_back", "inconclusive", "failed"}
    ),
    c.ROLLOUT_MANAGE: frozenset({"aborted", "retried", "extended"}),
}


def rollout_locked(rollout: Rollout) -> Rollout:
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


def rollout_decision_record(
    rollout: Rollout,
    *,
    actor: Actor,
    kind: str,
    to_weight: int,
    reason: str,
    statistics: dict[str, Any] | None = None,
    to: str | None = None,
) -> RolloutDecision:
    """Record a state-changing decision: move to status `to` (if given), store it, audit it.

    A decision that moves traffic (or starts the rollout) stores a route intent beside it;
    the caller applies it after its transaction commits (`routing.rollout_routes_apply`).
    The broadcast follows when the caller saves (`save_and_stream`).
    """
    if to is not None:
        transition(rollout, to)
    if not can_decide_rollout(actor, kind, decisions=JOB_DECISIONS):
        raise Forbidden(f"{actor} may not record a {kind} decision on a rollout")
    from_weight = rollout.weight
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
    if to_weight != from_weight or kind == "started":
        route_intent_record(rollout, decision, weight=to_weight, subsets=kind == "started")
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


def ownership_refusal_of(rollout: Rollout) -> str | None:
    """Why the rollout's namespace or host may no longer be routed by its team, or None.

    Reads the namespace from the cluster: ask it before taking the rollout's row lock.
    """
    service = rollout.service
    return ownership_refusal(service.team.slug, service.namespace, service.host)


def failed_if_not_owned(
    rollout: Rollout,
    *,
    actor: Actor,
    refusal: str | None,
    statistics: dict[str, Any] | None = None,
) -> bool:
    """Fail the rollout, routing nothing, if `refusal` (`ownership_refusal_of`) says why.

    Asked before every move of traffic (start, step, promotion): a namespace can change
    hands between the rollout's creation and any later step. The weight stays as it is,
    so nothing more is written into a namespace that is no longer the team's.
    """
    if refusal is None:
        return False
    rollout_decision_record(
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
