"""A person steers a rollout: promote by hand, abort, retry the analysis or extend it (audited).

An INCONCLUSIVE rollout holds the canary at its weight. Besides promoting anyway
and aborting (which the transition table also allows while the rollout runs), the
owning team can:

- retry: start the analysis afresh from the first step (earlier ticks stay on
  record but are no longer evidence), e.g. after fixing a metrics source;
- extend: keep the evidence and add ticks to the max duration, because the
  sample-size estimate says more traffic would settle it.

Each decision has one shape (`_steer`): refuse who may not, lock the rollout, move
it through the state machine, save, and after commit broadcast it (and, back to
RUNNING, schedule its next tick) and apply the traffic it orders, outside the lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from canary.models import Rollout, RolloutStatus
from canary.services.config import analysis_config, analysis_steps
from canary.services.freeze import rollout_freeze_sync
from canary.services.machine import rollout_decision_record, rollout_locked, save_and_stream
from canary.services.routing import rollout_routes_repair
from canary.services.validation import require_extension, required_reason
from kiln.errors import Forbidden, IllegalTransition, InvalidInput
from kiln.identity.permissions import Actor, can_manage_rollout, can_promote_rollout

# What a person's decision comes to: the canary weight it leaves, why, the statistics it rests on.
Outcome = tuple[int, str, dict[str, Any]]


def _steer(
    rollout: Rollout,
    *,
    actor: Actor,
    to: str,
    kind: str,
    decision: Callable[[Rollout], Outcome],
) -> Rollout:
    """Lock the rollout, move it to `to` with the (weight, reason, statistics) `decision` gives, save.

    `decision` runs on the locked row, before the transition: it may refuse (raise) or
    change the rollout's analysis fields, and answers where traffic goes and why. The
    traffic is written to the cluster after the commit; if that fails, the beat's sweep
    (or the next tick) applies it again.
    """
    with transaction.atomic():
        rollout = rollout_locked(rollout)
        to_weight, reason, statistics = decision(rollout)
        rollout_decision_record(
            rollout,
            to=to,
            actor=actor,
            kind=kind,
            to_weight=to_weight,
            reason=reason,
            statistics=statistics,
        )
        save_and_stream(rollout)
    rollout_routes_repair(actor=actor, rollout_id=rollout.pk)
    rollout_freeze_sync(rollout)
    return rollout


def rollout_abort(*, actor: Actor, rollout: Rollout, reason: str = "") -> Rollout:
    """Stop a rollout and send all traffic back to the baseline (engineers of the team)."""
    if not can_manage_rollout(actor, rollout.service.team.slug):
        raise Forbidden("only engineers of the owning team abort its rollouts")
    return _steer(
        rollout,
        actor=actor,
        to=RolloutStatus.ABORTED,
        kind="aborted",
        decision=lambda r: (0, reason or f"aborted by {actor}", r.analysis),
    )


def rollout_promote(*, actor: Actor, rollout: Rollout, reason: str = "") -> Rollout:
    """Promote by hand, overriding the analysis (approvers of the owning team, platform admins)."""
    if not can_promote_rollout(actor, rollout.service.team.slug):
        raise Forbidden(
            "only approvers who act for the owning team, and platform admins, promote by hand"
        )

    def decision(r: Rollout) -> Outcome:
        if r.status == RolloutStatus.PENDING:
            raise IllegalTransition(
                "the rollout has not started yet",
                extra={"from": r.status, "to": RolloutStatus.PROMOTED},
            )
        if r.status == RolloutStatus.INCONCLUSIVE and not reason.strip():
            # Promoting without the evidence is a person's call: it says why.
            raise InvalidInput(
                "promoting an inconclusive rollout needs a reason",
                extra={"fields": {"reason": ["say why the canary is promoted without evidence"]}},
            )
        return 100, reason or f"promoted by hand by {actor}", r.analysis

    return _steer(
        rollout, actor=actor, to=RolloutStatus.PROMOTED, kind="promoted", decision=decision
    )


def rollout_retry(*, actor: Actor, rollout: Rollout, reason: str) -> Rollout:
    """Restart the analysis of an inconclusive rollout from its first step (team engineers)."""
    if not can_manage_rollout(actor, rollout.service.team.slug):
        raise Forbidden("only engineers of the owning team retry its rollouts")
    reason = required_reason(reason)

    def decision(r: Rollout) -> Outcome:
        # The evidence so far stays on record with the decision; the analysis starts afresh.
        evidence, r.analysis = r.analysis, {}
        r.analysis_start, r.extra_ticks = r.ticks_done, 0
        return analysis_steps(r)[0][0], f"analysis restarted by {actor}: {reason}", evidence

    return _steer(rollout, actor=actor, to=RolloutStatus.RUNNING, kind="retried", decision=decision)


def rollout_extend(
    *, actor: Actor, rollout: Rollout, reason: str, ticks: int | None = None
) -> Rollout:
    """Give an inconclusive rollout `ticks` more (default: its planned steps again); keep the evidence."""
    if not can_manage_rollout(actor, rollout.service.team.slug):
        raise Forbidden("only engineers of the owning team extend its rollouts")
    reason = required_reason(reason)
    require_extension(ticks)

    def decision(r: Rollout) -> Outcome:
        added = analysis_config(r).horizon_ticks if ticks is None else ticks
        r.extra_ticks += added
        max_ticks = analysis_config(r).max_ticks
        return (
            r.weight,
            f"analysis extended by {added} ticks (max duration now {max_ticks} ticks) "
            f"by {actor}: {reason}",
            {**r.analysis, "extended_by": added, "max_ticks": max_ticks},
        )

    return _steer(
        rollout, actor=actor, to=RolloutStatus.RUNNING, kind="extended", decision=decision
    )
