"""Rollouts: start one, run its analysis tick by tick, and the beat's sweep of due ticks.

A rollout is created PENDING; tick 0 starts it (first step, DestinationRule and
VirtualService), each later tick reads both arms' metrics, asks the sequential
analysis (`canary.sequential`) and continues, steps, promotes, rolls back or holds
it inconclusive. Every change goes through the state machine (`machine`), in one
transaction with its audit event; the dashboard hears of it after commit (`stream`).
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit import record
from canary.metrics import read_windows, tick_seconds_errors
from canary.models import (
    ACTIVE_STATUSES,
    ROLLOUT_OPEN_STATUSES,
    Rollout,
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
    Analyzer,
    ConfigError,
    Decision,
    Evidence,
)
from canary.sequential import evidence as tick_evidence
from canary.services.config import analysis_config, analysis_steps
from canary.services.machine import decide, failed_if_not_owned, save_and_stream
from canary.services.stream import enqueue_tick
from canary.services.validation import dns_label_errors, rollout_errors
from canary.traffic import weight_at
from kiln.errors import Conflict, Forbidden, InvalidInput, Unavailable
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
    steps = list(DEFAULT_STEPS) if steps is None else steps
    config = {} if config is None else config
    errors = rollout_field_errors(
        baseline_version=baseline_version,
        canary_version=canary_version,
        steps=steps,
        ticks_per_step=ticks_per_step,
        tick_seconds=tick_seconds,
        config=config,
    )
    if "tick_seconds" not in errors and (too_short := tick_seconds_errors(service, tick_seconds)):
        errors["tick_seconds"] = too_short
    if errors:
        raise InvalidInput("The rollout is invalid.", extra={"fields": errors})
    rollout = Rollout(
        service=service,
        baseline_version=baseline_version,
        canary_version=canary_version,
        steps=steps,
        ticks_per_step=ticks_per_step,
        tick_seconds=float(tick_seconds),
        config=config,
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
    except ConfigError as exc:
        errors["config"] = [str(exc)]
        errors[f"config.{exc.field}"] = [exc.message]
    except (TypeError, ValueError) as exc:
        errors["config"] = [str(exc)]
    return errors


def _rollout_data(rollout: Rollout) -> dict[str, Any]:
    return {"service": str(rollout.service), **rollout_fields(rollout)}


def rollout_tick(*, rollout_id: Any, tick: int, actor: Actor = ANALYZER) -> str:
    """Run analysis tick `tick` (0 starts the rollout); a repeat or stale tick is a no-op.

    Idempotent per tick number: the rollout row is locked and `ticks_done` must be
    `tick - 1`, so a redelivered or duplicated task changes nothing. Only the canary
    analyzer (`rollout.analyze`) runs ticks.
    """
    if not can_analyze_rollout(actor):
        raise Forbidden(f"{actor} may not analyse rollouts")
    with tracer("kiln.canary").start_as_current_span(
        "canary.rollout.tick", attributes={"kiln.rollout": str(rollout_id), "kiln.tick": tick}
    ):
        with transaction.atomic():
            rollout = (
                Rollout.objects.select_for_update(of=("self",))
                .select_related("service__team")
                .filter(pk=rollout_id)
                .first()
            )
            if rollout is None or rollout.status not in ACTIVE_STATUSES:
                return "inactive"
            if tick == 0:
                if rollout.status != RolloutStatus.PENDING:
                    return "duplicate"
                return _start(rollout, actor)
            if rollout.status != RolloutStatus.RUNNING or rollout.ticks_done != tick - 1:
                return "duplicate"
            return _analyse(rollout, tick, actor)


def _start(rollout: Rollout, actor: Actor) -> str:
    if failed_if_not_owned(rollout, actor=actor):
        save_and_stream(rollout)
        return "failed"
    first = analysis_steps(rollout)[0][0]
    decide(
        rollout,
        to=RolloutStatus.RUNNING,
        actor=actor,
        kind="started",
        to_weight=first,
        reason=f"canary {rollout.canary_version} receives {first}% of traffic",
    )
    save_and_stream(rollout)
    return "started"


def _analyse(rollout: Rollout, tick: int, actor: Actor) -> str:
    cfg = analysis_config(rollout)
    try:
        baseline, canary, weight = read_windows(rollout, tick)
        ev = tick_evidence(baseline, canary, cfg)
    except Unavailable as exc:
        # A metrics error is no evidence: the tick is recorded as such and the clock runs on.
        ev, weight = Evidence.none(f"metrics unavailable: {exc.message}"), rollout.weight
    analyzer = Analyzer(cfg)
    history = [
        Evidence.from_dict(e)
        for e in rollout.ticks.filter(number__gt=rollout.analysis_start)
        .order_by("number")
        .values_list("evidence", flat=True)
    ]
    analyzer.replay(history)
    decision = analyzer.observe(ev)
    stats = decision.as_dict()
    tick_row = RolloutTick.objects.create(
        rollout=rollout,
        number=tick,
        weight=weight,
        evidence=ev.as_dict(),
        decision=stats,
        action=decision.action,
        trace_id=current_trace_id(),
    )
    rollout.ticks_done = tick
    summary = _stat_summary(stats)
    rollout.analysis = summary
    record(
        actor,
        "canary.tick.decided",
        rollout,
        {
            "tick": tick,
            "weight": weight,
            "action": decision.action,
            "reason": decision.reason,
            "llr": stats["llr"],
            "cusum": stats["cusum"],
            "requests_needed": stats["requests_needed"],
            "minutes_needed": stats["minutes_needed"],
        },
    )
    return _act(rollout, decision, actor=actor, statistics=summary, tick_row=tick_row)


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
            rollout, actor=actor, statistics=statistics
        )
        if not failed:
            decide(
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
        if stepping and failed_if_not_owned(rollout, actor=actor, statistics=statistics):
            save_and_stream(rollout, last_tick=tick_row)
            return "failed"
        if stepping:
            decide(
                rollout,
                actor=actor,
                kind="step_advanced",
                to_weight=next_weight,
                reason=f"no regression after {tick} ticks: canary to {next_weight}%",
                statistics=statistics,
            )
    save_and_stream(rollout, last_tick=tick_row)
    return decision.action


def _stat_summary(stats: dict[str, Any]) -> dict[str, Any]:
    """What decisions, audit events and the API carry: bounds, CUSUM, sample sizes."""
    keys = (
        "tick",
        "llr",
        "llr_lower",
        "llr_upper",
        "cusum",
        "cusum_threshold",
        "cusum_median",
        "cusum_tail",
        "errors_accepted",
        "channels",
        "requests_needed",
        "minutes_needed",
        "empty_ticks",
        "max_ticks",
        "settle",
    )
    return {k: stats.get(k) for k in keys}


def rollouts_tick_due(*, now: datetime | None = None) -> int:
    """Enqueue the next tick of every active rollout that is due (the beat's safety net)."""
    now = now or timezone.now()
    due = Rollout.objects.filter(status__in=ACTIVE_STATUSES, next_tick_at__lte=now)
    count = 0
    for rollout_id, status, ticks_done in due.values_list("id", "status", "ticks_done"):
        tick = 0 if status == RolloutStatus.PENDING else ticks_done + 1
        enqueue_tick(rollout_id, tick, countdown=0)
        count += 1
    return count
