"""Rollouts: start one, run its analysis tick by tick, and the beat's sweep of due ticks.

A rollout is created PENDING; tick 0 starts it (first step, DestinationRule and
VirtualService), each later tick reads both arms' metrics, asks the sequential
analysis (`canary.sequential`) and continues, steps, promotes, rolls back or holds
it inconclusive. Every change goes through the state machine (`machine`), in one
transaction with its audit event; the dashboard hears of it after commit (`stream`).
Reads happen before the rollout's row is locked and cluster writes after it is
released (route intents, `routing`): the lock covers database writes only.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from audit import record
from canary.metrics import tick_seconds_errors
from canary.models import (
    ACTIVE_STATUSES,
    ROLLOUT_OPEN_STATUSES,
    Rollout,
    RolloutRoute,
    RolloutStatus,
    RolloutTick,
    Service,
)
from canary.ownership import require_namespace_of, require_service_host
from canary.selectors import rollout_fields
from canary.sequential import (
    CONTINUE,
    INCONCLUSIVE,
    PROMOTE,
    ROLLBACK,
    ConfigError,
    Decision,
    override_problems,
)
from canary.services.analysis import TickPlan, stat_summary, tick_decide, tick_plan, tick_read
from canary.services.config import analysis_config, analysis_steps
from canary.services.freeze import rollout_freeze_sync
from canary.services.machine import (
    failed_if_not_owned,
    rollout_decision_record,
    save_and_stream,
)
from canary.services.routing import rollout_routes_repair
from canary.services.stream import enqueue_tick
from canary.services.validation import dns_label_errors, rollout_errors
from canary.traffic import weight_at
from kiln.errors import Conflict, Forbidden, InvalidInput
from kiln.identity.permissions import (
    Actor,
    can_analyze_rollout,
    can_manage_rollout,
    system_actor,
)
from kiln.observability import current_trace_id, tracer

ANALYZER = system_actor("canary-analyzer")
DEFAULT_STEPS = (5, 25, 50, 100)
# AnalysisConfig settings checked against the planned steps' length (the horizon).
HORIZON_KEYS = frozenset({"warmup_ticks", "horizon_ticks", "max_ticks"})


def rollout_create(
    *,
    actor: Actor,
    service: Service,
    baseline_version: str,
    canary_version: str,
    steps: list[int] | None = None,
    ticks_per_step: int = 8,
    tick_seconds: float = 60.0,
    config: dict[str, Any] | None = None,
    seed: int | None = None,
) -> Rollout:
    """Start a rollout of `canary_version` (PENDING; the analysis loop takes it from there).

    `seed` fixes the simulated traffic of the rollout (demo data); by default it is random.
    """
    if not can_manage_rollout(actor, service.team.slug):
        raise Forbidden("only engineers of the owning team roll out its services")
    require_namespace_of(service.team.slug, service.namespace)
    require_service_host(service.host, service.namespace)
    # The settings as asked, checked as a whole, then stored as they are (tick_seconds a float).
    definition = {
        "baseline_version": baseline_version,
        "canary_version": canary_version,
        "steps": list(DEFAULT_STEPS) if steps is None else steps,
        "ticks_per_step": ticks_per_step,
        "tick_seconds": tick_seconds,
        "config": {} if config is None else config,
    }
    errors = rollout_field_errors(**definition)
    if "tick_seconds" not in errors and (too_short := tick_seconds_errors(service, tick_seconds)):
        errors["tick_seconds"] = too_short
    if errors:
        raise InvalidInput("The rollout is invalid.", extra={"fields": errors})
    rollout = Rollout(
        service=service,
        **{**definition, "tick_seconds": float(tick_seconds)},
        seed=seed if seed is not None else random.SystemRandom().randrange(1, 2**62),
        created_by_id=actor.user_id,
    )
    with transaction.atomic():
        Service.objects.select_for_update().get(pk=service.pk)
        if Rollout.objects.filter(service=service, status__in=ROLLOUT_OPEN_STATUSES).exists():
            raise Conflict(f"{service} already has an active rollout")
        rollout.next_tick_at = timezone.now()
        rollout.save()
        record(actor, "canary.rollout.created", rollout, _rollout_data(rollout))
        transaction.on_commit(lambda: enqueue_tick(rollout.pk, 0, countdown=0))
    return rollout


def rollout_field_errors(
    *,
    baseline_version: Any,
    canary_version: Any,
    steps: Any,
    ticks_per_step: Any,
    tick_seconds: Any,
    config: Any,
) -> dict[str, list[str]]:
    """Every problem of a rollout's settings by field, empty when it may start: its steps,
    tick settings, versions and the AnalysisConfig they and its overrides make.

    An impossible setting is named twice: `config` and `config.<setting>`. When the steps
    or tick settings are wrong, the overrides are still checked, on the default steps,
    except those measured against the steps' horizon (`HORIZON_KEYS`).
    """
    errors = rollout_errors(
        steps=steps, ticks_per_step=ticks_per_step, tick_seconds=tick_seconds, config=config
    )
    errors |= dns_label_errors(baseline_version=baseline_version, canary_version=canary_version)
    if not errors.keys() & {"baseline_version", "canary_version"} and (
        baseline_version == canary_version
    ):
        errors["canary_version"] = ["must differ from baseline_version"]
    if "config" in errors:
        return errors
    planned = not errors.keys() & {"steps", "ticks_per_step", "tick_seconds"}
    probe = Rollout(
        steps=steps if planned else list(DEFAULT_STEPS),
        ticks_per_step=ticks_per_step if planned else 8,
        tick_seconds=float(tick_seconds) if planned else 60.0,
        config=config if planned else {k: v for k, v in config.items() if k not in HORIZON_KEYS},
    )
    try:
        analysis_config(probe)
        problems = override_problems(config)
    except ConfigError as exc:
        problems = exc.problems
    except (TypeError, ValueError) as exc:
        errors["config"] = [str(exc)]
        return errors
    if problems:
        errors["config"] = [str(problem) for problem in problems]
        for problem in problems:
            errors[f"config.{problem.field}"] = [problem.message]
    return errors


def _rollout_data(rollout: Rollout) -> dict[str, Any]:
    return {"service": str(rollout.service), **rollout_fields(rollout)}


def rollout_tick(*, rollout_id: Any, tick: int, actor: Actor = ANALYZER) -> str:
    """Run analysis tick `tick` (0 starts the rollout); a repeat or stale tick is a no-op.

    No I/O under the rollout's row lock. The metrics (Prometheus over HTTP, the simulated
    cluster's routes), the analysis and the namespace's owner are read first, without it;
    then the row is locked and the tick recorded only if the rollout is as it was read
    (`ticks_done` is `tick - 1` and nothing saved it meanwhile), so a redelivered,
    duplicated or overtaken tick changes nothing. The traffic it orders is a route intent,
    written to the cluster after the commit (`routing`); one a crash left unapplied is
    applied before anything is read. Only the canary analyzer (`rollout.analyze`) runs ticks.
    """
    if not can_analyze_rollout(actor):
        raise Forbidden(f"{actor} may not analyse rollouts")
    with tracer("kiln.canary").start_as_current_span(
        "canary.rollout.tick", attributes={"kiln.rollout": str(rollout_id), "kiln.tick": tick}
    ):
        unapplied = RolloutRoute.objects.filter(rollout=OuterRef("pk"), applied_at__isnull=True)
        rollout = (
            Rollout.objects.select_related("service__team")
            .annotate(unapplied=Exists(unapplied))
            .filter(pk=rollout_id)
            .first()
        )
        if rollout is not None and rollout.unapplied:
            rollout_routes_repair(actor=actor, rollout_id=rollout.pk)
        skipped = _not_due(rollout and (rollout.status, rollout.ticks_done), tick)
        if skipped is not None:
            return skipped
        plan = tick_plan(rollout, tick)
        weight = rollout.weight
        with transaction.atomic():
            outcome = _record(rollout, tick, actor, plan)
        # A decision routes (stores an intent) when it starts the rollout or moves its weight.
        if outcome == "started" or rollout.weight != weight:
            rollout_routes_repair(actor=actor, rollout_id=rollout.pk)
        # Karpenter stays off the canary's nodes from the start; they thaw when it stops
        # (the beat renews the freeze in between: a continuing tick does no more I/O).
        if outcome == "started" or rollout.status != RolloutStatus.RUNNING:
            rollout_freeze_sync(rollout)
        return outcome


def _not_due(state: tuple[str, int] | None, tick: int) -> str | None:
    """Why tick `tick` is not the rollout's next one ("inactive", "duplicate"), or None."""
    if state is None or state[0] not in ACTIVE_STATUSES:
        return "inactive"
    status, ticks_done = state
    if tick == 0:
        return None if status == RolloutStatus.PENDING else "duplicate"
    if status != RolloutStatus.RUNNING or ticks_done != tick - 1:
        return "duplicate"
    return None


def _record(rollout: Rollout, tick: int, actor: Actor, plan: TickPlan) -> str:
    """Under the row lock: if the rollout is as `plan` read it, record the tick and act on it."""
    state = (
        Rollout.objects.select_for_update()
        .filter(pk=rollout.pk)
        .values_list("status", "ticks_done", "updated_at")
        .first()
    )
    skipped = _not_due(state and state[:2], tick)
    if skipped is not None:
        return skipped
    if state[2] != rollout.updated_at:
        # Changed since it was read (a person steered it): what was read is not this tick's.
        return "stale"
    if tick == 0:
        return _start(rollout, actor, plan.refusal)
    if plan.evidence is None:
        plan.evidence, plan.weight = tick_read(rollout, tick)
        plan.decision = tick_decide(rollout, plan.evidence)
    assert plan.decision is not None
    return _analyse(rollout, tick, actor, plan)


def _start(rollout: Rollout, actor: Actor, refusal: str | None) -> str:
    if failed_if_not_owned(rollout, actor=actor, refusal=refusal):
        save_and_stream(rollout)
        return "failed"
    first = analysis_steps(rollout)[0][0]
    rollout_decision_record(
        rollout,
        to=RolloutStatus.RUNNING,
        actor=actor,
        kind="started",
        to_weight=first,
        reason=f"canary {rollout.canary_version} receives {first}% of traffic",
    )
    save_and_stream(rollout)
    return "started"


def _analyse(rollout: Rollout, tick: int, actor: Actor, plan: TickPlan) -> str:
    assert plan.evidence is not None and plan.decision is not None
    decision = plan.decision
    stats = decision.as_dict()
    tick_row = RolloutTick.objects.create(
        rollout=rollout,
        number=tick,
        weight=plan.weight,
        evidence=plan.evidence.as_dict(),
        decision=stats,
        action=decision.action,
        trace_id=current_trace_id(),
    )
    rollout.ticks_done = tick
    summary = stat_summary(stats)
    rollout.analysis = summary
    record(
        actor,
        "canary.tick.decided",
        rollout,
        {
            "tick": tick,
            "weight": plan.weight,
            "action": decision.action,
            "reason": decision.reason,
            "llr": stats["llr"],
            "cusum": stats["cusum"],
            "requests_needed": stats["requests_needed"],
            "minutes_needed": stats["minutes_needed"],
        },
    )
    return _act(
        rollout, decision, actor=actor, statistics=summary, tick_row=tick_row, refusal=plan.refusal
    )


# The verdicts that end the analysis or hold it for a person: status, kind, canary weight.
_VERDICTS: dict[str, tuple[str, str, int | None]] = {
    ROLLBACK: (RolloutStatus.ROLLED_BACK, "rolled_back", 0),
    PROMOTE: (RolloutStatus.PROMOTED, "promoted", 100),
    # Held at its weight (None): a person promotes anyway, aborts, retries or extends.
    INCONCLUSIVE: (RolloutStatus.INCONCLUSIVE, "inconclusive", None),
}


def _act(
    rollout: Rollout,
    decision: Decision,
    *,
    actor: Actor,
    statistics: dict[str, Any],
    tick_row: RolloutTick,
    refusal: str | None,
) -> str:
    """Carry out the tick's decision: settle or hold the rollout, or step its traffic on."""
    tick = rollout.ticks_done - rollout.analysis_start
    if decision.action in _VERDICTS:
        to, kind, weight = _VERDICTS[decision.action]
        reason = decision.reason
        if decision.action == INCONCLUSIVE:
            reason = " ".join(p for p in (decision.reason + ".", decision.settle) if p)
        # A namespace that changed hands fails a promotion where it stands instead.
        failed = decision.action == PROMOTE and failed_if_not_owned(
            rollout, actor=actor, refusal=refusal, statistics=statistics
        )
        if not failed:
            rollout_decision_record(
                rollout,
                to=to,
                actor=actor,
                kind=kind,
                to_weight=rollout.weight if weight is None else weight,
                reason=reason,
                statistics=statistics,
            )
    else:
        assert decision.action == CONTINUE
        next_weight = weight_at(analysis_steps(rollout), tick)
        stepping = next_weight != rollout.weight
        if stepping and failed_if_not_owned(
            rollout, actor=actor, refusal=refusal, statistics=statistics
        ):
            save_and_stream(rollout, last_tick=tick_row)
            return "failed"
        if stepping:
            rollout_decision_record(
                rollout,
                actor=actor,
                kind="step_advanced",
                to_weight=next_weight,
                reason=f"no regression in {tick} tick{'' if tick == 1 else 's'} so far: canary to {next_weight}%",
                statistics=statistics,
            )
    save_and_stream(rollout, last_tick=tick_row)
    return decision.action


def rollouts_tick_due(*, now: datetime | None = None) -> int:
    """Enqueue the next tick of every active rollout that is due (the beat's safety net).

    Route intents a crash left unapplied are applied first, those of finished rollouts too.
    """
    rollout_routes_repair(actor=ANALYZER)
    now = now or timezone.now()
    due = Rollout.objects.filter(status__in=ACTIVE_STATUSES, next_tick_at__lte=now)
    count = 0
    for rollout_id, status, ticks_done in due.values_list("id", "status", "ticks_done"):
        tick = 0 if status == RolloutStatus.PENDING else ticks_done + 1
        enqueue_tick(rollout_id, tick, countdown=0)
        count += 1
    return count
