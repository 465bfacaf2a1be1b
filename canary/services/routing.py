"""A rollout's traffic, moved through intents: recorded under the row lock, applied after commit.

A decision that moves traffic (`machine.rollout_decision_record`) stores a
`RolloutRoute` in its transaction and writes nothing to the cluster. After the
commit, `rollout_routes_apply` writes each unapplied intent's VirtualService (and, on
the start, DestinationRule) through `canary.routes`, outside any transaction, and
then marks it applied (audited as `canary.route.applied`). A rollback leaves the
routes as they were; a crash between the apply and the mark leaves the intent
unapplied, and the rollout's next tick (or the beat's sweep) applies it again, which
is idempotent: a VirtualService written for a later intent is never replaced.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit import record
from canary.models import Rollout, RolloutDecision, RolloutRoute
from canary.routes import rollout_routes_write
from canary.traffic import destination_rule, virtual_service
from kiln.cluster.backends import get_backend
from kiln.identity.permissions import Actor

log = logging.getLogger("kiln.canary")


def route_intent_record(
    rollout: Rollout, decision: RolloutDecision, *, weight: int, subsets: bool
) -> RolloutRoute:
    """Store the traffic `decision` orders, in the caller's transaction; applied after commit."""
    return RolloutRoute.objects.create(
        rollout=rollout, decision=decision, weight=weight, subsets=subsets
    )


def route_manifests(route: RolloutRoute) -> list[dict[str, Any]]:
    """The Istio objects an intent writes: its VirtualService, after the DestinationRule when starting."""
    rollout, service = route.rollout, route.rollout.service
    vs = virtual_service(
        name=service.name,
        namespace=service.namespace,
        host=service.host,
        canary_weight=route.weight,
        rollout_id=str(rollout.pk),
        intent=route.pk,
    )
    if not route.subsets:
        return [vs]
    rule = destination_rule(
        name=service.name,
        namespace=service.namespace,
        host=service.host,
        baseline_version=rollout.baseline_version,
        canary_version=rollout.canary_version,
    )
    return [rule, vs]


def rollout_routes_apply(*, actor: Actor, rollout_id: Any = None, backend: Any = None) -> int:
    """Apply the unapplied route intents (of one rollout, or all), oldest first; returns how many.

    Must run outside any transaction that locks a rollout: it writes to the cluster. The
    mark is conditional, so two appliers racing record the intent once.
    """
    pending = RolloutRoute.objects.filter(applied_at__isnull=True).select_related(
        "rollout__service", "decision"
    )
    if rollout_id is not None:
        pending = pending.filter(rollout_id=rollout_id)
    backend = backend or get_backend()
    applied = 0
    for route in pending.order_by("id"):
        rollout_routes_write(backend, route_manifests(route))
        applied += route_applied_mark(route, actor=actor)
    return applied


def route_applied_mark(route: RolloutRoute, *, actor: Actor) -> int:
    """Mark an intent applied and audit it; 0 when another applier marked it first."""
    with transaction.atomic():
        marked = RolloutRoute.objects.filter(pk=route.pk, applied_at__isnull=True).update(
            applied_at=timezone.now()
        )
        if marked:
            record(
                actor,
                "canary.route.applied",
                route,
                {
                    "rollout": str(route.rollout_id),
                    "decision": route.decision.kind,
                    "weight": route.weight,
                    "subsets": route.subsets,
                },
            )
    return marked


def rollout_routes_repair(*, actor: Actor, rollout_id: Any = None) -> int:
    """Apply what a crash left unapplied; a failure is logged and left for the next attempt."""
    try:
        return rollout_routes_apply(actor=actor, rollout_id=rollout_id)
    except Exception:  # noqa: BLE001 - the intent stays unapplied: the next tick or sweep retries
        log.exception("could not apply the route intents of rollout %s", rollout_id or "(all)")
        return 0
