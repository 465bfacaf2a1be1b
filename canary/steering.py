"""A person steers a held rollout: retry the analysis or extend it (services, audited with a reason).

An INCONCLUSIVE rollout holds the canary at its weight. Besides promoting anyway
and aborting (`canary.services.rollout_promote` / `rollout_abort`, which the
transition table allows from INCONCLUSIVE), the owning team can:

- retry: start the analysis afresh from the first step (earlier ticks stay on
  record but are no longer evidence), e.g. after fixing a metrics source;
- extend: keep the evidence and add ticks to the max duration, because the
  sample-size estimate says more traffic would settle it.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from canary.models import Rollout, RolloutStatus
from canary.services import (
    _after_commit,
    _decide,
    _transition,
    analysis_config,
    analysis_steps,
)
from kiln.errors import Forbidden, InvalidInput
from kiln.identity.permissions import Actor, can_manage_rollout

MAX_EXTENSION_TICKS = 10_000


def _need_reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput(
            "a reason is required", extra={"fields": {"reason": ["say why, for the audit trail"]}}
        )
    return reason


def _locked(rollout: Rollout) -> Rollout:
    return Rollout.objects.select_for_update().select_related("service__team").get(pk=rollout.pk)


def rollout_retry(*, actor: Actor, rollout: Rollout, reason: str) -> Rollout:
    """Restart the analysis of an inconclusive rollout from its first step (team engineers)."""
    if not can_manage_rollout(actor, rollout.service.team.slug):
        raise Forbidden("only engineers of the owning team retry its rollouts")
    reason = _need_reason(reason)
    with transaction.atomic():
        rollout = _locked(rollout)
        _transition(rollout, RolloutStatus.RUNNING)
        rollout.analysis_start = rollout.ticks_done
        rollout.extra_ticks = 0
        first = analysis_steps(rollout)[0][0]
        _decide(
            rollout,
            actor=actor,
            kind="retried",
            to_weight=first,
            reason=f"analysis restarted by {actor}: {reason}",
            statistics=rollout.analysis,
        )
        rollout.analysis = {}
        rollout.next_tick_at = timezone.now() + timedelta(seconds=rollout.tick_seconds)
        rollout.save()
        _after_commit(rollout, countdown=rollout.tick_seconds)
    return rollout


def rollout_extend(
    *, actor: Actor, rollout: Rollout, reason: str, ticks: int | None = None
) -> Rollout:
    """Give an inconclusive rollout `ticks` more (default: its planned steps again); keep the evidence."""
    if not can_manage_rollout(actor, rollout.service.team.slug):
        raise Forbidden("only engineers of the owning team extend its rollouts")
    reason = _need_reason(reason)
    if ticks is not None and (
        not isinstance(ticks, int)
        or isinstance(ticks, bool)
        or not 1 <= ticks <= MAX_EXTENSION_TICKS
    ):
        raise InvalidInput(
            "ticks must be an integer from 1 to 10000",
            extra={"fields": {"ticks": [f"an integer from 1 to {MAX_EXTENSION_TICKS}"]}},
        )
    with transaction.atomic():
        rollout = _locked(rollout)
        if ticks is None:
            ticks = analysis_config(rollout).horizon_ticks
        _transition(rollout, RolloutStatus.RUNNING)
        rollout.extra_ticks += ticks
        max_ticks = analysis_config(rollout).max_ticks
        _decide(
            rollout,
            actor=actor,
            kind="extended",
            to_weight=rollout.weight,
            reason=f"analysis extended by {ticks} ticks (max duration now {max_ticks} ticks) "
            f"by {actor}: {reason}",
            statistics={**rollout.analysis, "extended_by": ticks, "max_ticks": max_ticks},
        )
        rollout.next_tick_at = timezone.now() + timedelta(seconds=rollout.tick_seconds)
        rollout.save()
        _after_commit(rollout, countdown=rollout.tick_seconds)
    return rollout
