"""Pushed metrics: one arm's window, stored for the next tick of a push-fed rollout."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from audit import record
from canary.models import ACTIVE_STATUSES, MetricsSource, Observation, Rollout
from canary.services.validation import observation_errors
from kiln.columns import column_errors
from kiln.errors import Conflict, Forbidden, InvalidInput
from kiln.identity.permissions import Actor, can_manage_rollout


def observation_push(
    *,
    actor: Actor,
    rollout: Rollout,
    arm: str,
    requests: int,
    errors: int,
    latencies_ms: list[float] | None = None,
    observed_at: datetime | None = None,
) -> Observation:
    """Store one arm's metrics for the next tick of a push-fed rollout.

    Refused whole (400, nothing stored): negative counts, errors above requests, more
    latency samples than requests, or a window ending no later than the rollout's start or
    the arm's last window.
    """
    if not can_manage_rollout(actor, rollout.service.team.slug):
        raise Forbidden("only engineers of the owning team push its metrics")
    latencies_ms = latencies_ms or []
    # Counts past their PositiveIntegerField columns are field errors, not a database error.
    fields = column_errors(Observation, {"requests": requests, "errors": errors})
    fields |= observation_errors(
        arm=arm,
        requests=requests,
        errors=errors,
        latencies_ms=latencies_ms,
        observed_at=observed_at,
    )
    if fields:
        raise InvalidInput("The observation is invalid.", extra={"fields": fields})
    with transaction.atomic():
        rollout = Rollout.objects.select_for_update().select_related("service").get(pk=rollout.pk)
        if rollout.service.metrics_source != MetricsSource.PUSH:
            raise Conflict("this rollout's service does not take pushed metrics")
        if rollout.status not in ACTIVE_STATUSES:
            raise Conflict(f"the rollout is {rollout.status}")
        observed_at = observed_at or timezone.now()
        last = (
            rollout.observations.filter(arm=arm, observed_at__isnull=False)
            .order_by("-observed_at")
            .values_list("observed_at", flat=True)
            .first()
        )
        if observed_at <= rollout.created_at:
            # A window that ended before the rollout began measured neither of its arms.
            raise InvalidInput(
                "The observation is older than the rollout.",
                extra={"fields": {"observed_at": [
                    f"must be after the rollout began ({rollout.created_at.isoformat()})"
                ]}},
            )  # fmt: skip
        if last is not None and observed_at <= last:
            raise InvalidInput(
                "The observation is out of order.",
                extra={
                    "fields": {
                        "observed_at": [
                            f"must be after the {arm} arm's last window ({last.isoformat()})"
                        ]
                    }
                },
            )
        obs = Observation.objects.create(
            rollout=rollout,
            arm=arm,
            requests=requests,
            errors=errors,
            latencies_ms=[float(v) for v in latencies_ms],
            observed_at=observed_at,
        )
        record(
            actor,
            "canary.observation.received",
            rollout,
            {"arm": arm, "requests": requests, "errors": errors, "samples": len(latencies_ms)},
        )
    return obs
