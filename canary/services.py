"""Rollout writes: create, analyse one tick, shift traffic, promote, roll back, abort.

Every change happens here, in a transaction, with its audit event beside it;
broadcasts to the dashboard go out in `transaction.on_commit`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import threading
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from audit import record
from canary.bench import weight_at
from canary.models import (
    ACTIVE_STATUSES,
    ROLLOUT_OPEN_STATUSES,
    ROLLOUT_TERMINAL_STATUSES,
    ROLLOUT_TRANSITIONS,
    Arm,
    MetricsSource,
    Observation,
    Rollout,
    RolloutDecision,
    RolloutStatus,
    RolloutTick,
    Service,
)
from canary.ownership import ownership_refusal, require_namespace_of, require_service_host
from canary.sequential import (
    CONTINUE,
    INCONCLUSIVE,
    PROMOTE,
    ROLLBACK,
    AnalysisConfig,
    Analyzer,
    ConfigError,
    Evidence,
)
from canary.sequential import evidence as tick_evidence
from canary.simulate import CLASSES, REGRESSIONS
from canary.traffic import destination_rule, virtual_service
from kiln.columns import column_errors
from kiln.errors import (
    Conflict,
    Forbidden,
    IllegalTransition,
    InvalidInput,
    NotFound,
    Unavailable,
)
from kiln.identity.permissions import (
    Actor,
    can_analyze_rollout,
    can_decide_rollout,
    can_manage_rollout,
    can_promote_rollout,
    system_actor,
)
from kiln.observability import current_trace_id, tracer
from portal.models import DNS_LABEL, Team

log = logging.getLogger("kiln.canary")
ANALYZER = system_actor("canary-analyzer")
MAX_LATENCY_SAMPLES = 10_000
CONFIG_KEYS = {f.name for f in dataclasses.fields(AnalysisConfig)} - {
    "horizon_ticks",
    "tick_seconds",
}
MAX_DURATION_FACTOR = 3  # by default the analysis may extend itself to 3x its planned steps


class RolloutNotVisible(NotFound):
    code = "rollout_not_found"


# --- services (the routed things) ---------------------------------------------------------


def service_create(
    *,
    actor: Actor,
    team: Team,
    name: str,
    namespace: str,
    host: str = "",
    metrics_source: str = MetricsSource.SIMULATED,
    prometheus_url: str = "",
    queries: dict[str, str] | None = None,
    sim_traffic_class: str = "steady",
    backend: Any = None,
) -> Service:
    """Register a service for canary rollouts (engineers of its team, platform admins).

    Its namespace must belong to the team and its host must be a service of that
    namespace (canary.ownership; stored fully qualified); its query templates and
    metrics server are checked (canary.metrics). Any refusal changes nothing.
    """
    from canary.metrics import check_prometheus_url, validate_queries

    if not can_manage_rollout(actor, team.slug):
        raise Forbidden("only engineers of the owning team register its services")
    if metrics_source not in MetricsSource.values:
        raise InvalidInput(f"metrics_source must be one of {', '.join(MetricsSource.values)}")
    if sim_traffic_class not in CLASSES:
        raise InvalidInput(f"sim_traffic_class must be one of {', '.join(CLASSES)}")
    for field, value in (("name", name), ("namespace", namespace)):
        try:
            DNS_LABEL(value)
        except Exception:  # noqa: BLE001 - DNS_LABEL raises ValidationError
            raise InvalidInput(
                f"{field} must be a DNS-1123 label", extra={"fields": {field: ["a DNS-1123 label"]}}
            ) from None
    queries = validate_queries(queries)
    prometheus_url = check_prometheus_url(
        prometheus_url or "", required=metrics_source == MetricsSource.PROMETHEUS
    )
    fqdn = require_service_host(host or name, namespace)
    require_namespace_of(team.slug, namespace, backend)
    service = Service(
        team=team,
        name=name,
        namespace=namespace,
        host=fqdn,
        metrics_source=metrics_source,
        prometheus_url=prometheus_url,
        queries=queries,
        sim_traffic_class=sim_traffic_class,
    )
    # A duplicate is a Conflict (409), checked below; full_clean would make it a 400.
    service.full_clean(validate_unique=False, validate_constraints=False)
    with transaction.atomic():
        if Service.objects.filter(namespace=namespace, name=name).exists():
            raise Conflict(f"service {namespace}/{name} already exists")
        service.save()
        record(actor, "canary.service.created", service, _service_data(service))
    return service


def service_set_simulated_regression(
    *, actor: Actor, service: Service, version: str, regression: str | None
) -> Service:
    """Give (or take away) a simulated regression for one version of a demo service."""
    if not can_manage_rollout(actor, service.team.slug):
        raise Forbidden("only engineers of the owning team change its simulation")
    if regression is not None and regression not in REGRESSIONS:
        raise InvalidInput(f"regression must be one of {', '.join(REGRESSIONS)} or null")
    with transaction.atomic():
        service = Service.objects.select_for_update().get(pk=service.pk)
        regressions = dict(service.sim_regressions or {})
        if regression is None:
            regressions.pop(version, None)
        else:
            regressions[version] = regression
        service.sim_regressions = regressions
        service.save(update_fields=["sim_regressions"])
        record(
            actor,
            "canary.service.simulation_changed",
            service,
            {"version": version, "regression": regression},
        )
    return service


def _service_data(service: Service) -> dict[str, Any]:
    return {
        "team": service.team.slug,
        "name": service.name,
        "namespace": service.namespace,
        "host": service.host,
        "metrics_source": service.metrics_source,
    }


# --- rollouts -----------------------------------------------------------------------------


def analysis_steps(rollout: Rollout) -> tuple[tuple[int, int], ...]:
    """The analysed steps ((weight, ticks), ...): every step below 100%."""
    return tuple((int(w), rollout.ticks_per_step) for w in rollout.steps if int(w) < 100)


def analysis_config(rollout: Rollout) -> AnalysisConfig:
    """The rollout's AnalysisConfig: defaults, horizon from its steps, then its overrides.

    The max duration is `MAX_DURATION_FACTOR` times the planned steps unless the rollout
    sets `max_ticks`, plus the ticks a person added by extending the analysis.
    """
    horizon = rollout.ticks_per_step * len(analysis_steps(rollout))
    base: dict[str, Any] = {
        "horizon_ticks": horizon,
        "warmup_ticks": min(5, max(1, horizon // 5)),
        "max_ticks": MAX_DURATION_FACTOR * horizon,
        "tick_seconds": float(rollout.tick_seconds),
    }
    base.update(rollout.config or {})
    if isinstance(base.get("max_ticks"), int):
        base["max_ticks"] += rollout.extra_ticks
    return AnalysisConfig(**base)


def _validate_rollout(
    steps: Any, ticks_per_step: Any, tick_seconds: Any, config: Any
) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if (
        not isinstance(steps, list)
        or len(steps) < 2
        or not all(isinstance(w, int) and not isinstance(w, bool) for w in steps)
    ):
        errors["steps"] = ["a list of at least two integer weights, e.g. [5, 25, 50, 100]"]
    elif steps != sorted(set(steps)) or steps[0] <= 0 or steps[-1] != 100:
        errors["steps"] = ["weights must increase strictly from above 0 and end at 100"]
    if not isinstance(ticks_per_step, int) or not 1 <= ticks_per_step <= 1000:
        errors["ticks_per_step"] = ["an integer from 1 to 1000"]
    if not isinstance(tick_seconds, int | float) or not 0.2 <= float(tick_seconds) <= 3600:
        errors["tick_seconds"] = ["a number of seconds from 0.2 to 3600"]
    if not isinstance(config, dict):
        errors["config"] = ["an object of AnalysisConfig fields"]
    elif set(config) - CONFIG_KEYS:
        errors["config"] = [f"unknown fields: {', '.join(sorted(set(config) - CONFIG_KEYS))}"]
    return errors


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
    steps = [5, 25, 50, 100] if steps is None else steps
    config = {} if config is None else config
    errors = _validate_rollout(steps, ticks_per_step, tick_seconds, config)
    for field, value in (
        ("baseline_version", baseline_version),
        ("canary_version", canary_version),
    ):
        try:
            DNS_LABEL(value)
        except Exception:  # noqa: BLE001 - DNS_LABEL raises ValidationError
            errors[field] = ["a DNS-1123 label"]
    if not errors and baseline_version == canary_version:
        errors["canary_version"] = ["must differ from baseline_version"]
    rollout = Rollout(
        service=service,
        baseline_version=baseline_version,
        canary_version=canary_version,
        steps=steps,
        ticks_per_step=ticks_per_step,
        tick_seconds=float(tick_seconds) if not errors.get("tick_seconds") else 60.0,
        config=config,
        seed=seed if seed is not None else random.SystemRandom().randrange(1, 2**62),
        created_by_id=actor.user_id,
    )
    if not errors:
        try:
            analysis_config(rollout)
        except ConfigError as exc:
            # Named twice: the config object, and the setting within it.
            errors["config"] = [str(exc)]
            errors[f"config.{exc.field}"] = [exc.message]
        except (TypeError, ValueError) as exc:
            errors["config"] = [str(exc)]
    if errors:
        raise InvalidInput("The rollout is invalid.", extra={"fields": errors})
    with transaction.atomic():
        Service.objects.select_for_update().get(pk=service.pk)
        if Rollout.objects.filter(service=service, status__in=ROLLOUT_OPEN_STATUSES).exists():
            raise Conflict(f"{service} already has an active rollout")
        rollout.next_tick_at = timezone.now()
        rollout.save()
        record(actor, "canary.rollout.created", rollout, _rollout_data(rollout))
        transaction.on_commit(lambda: _enqueue_tick(rollout.pk, 0, countdown=0))
    return rollout


def _rollout_data(rollout: Rollout) -> dict[str, Any]:
    return {
        "service": str(rollout.service),
        "baseline_version": rollout.baseline_version,
        "canary_version": rollout.canary_version,
        "steps": rollout.steps,
        "ticks_per_step": rollout.ticks_per_step,
        "tick_seconds": rollout.tick_seconds,
        "status": rollout.status,
        "weight": rollout.weight,
    }


def _transition(rollout: Rollout, to: str) -> None:
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


def _route(rollout: Rollout, weight: int, *, subsets: bool = False) -> None:
    """Apply the VirtualService at `weight` (and the DestinationRule's subsets when starting)."""
    from portal.delivery import get_backend

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
    # An injected chaos fault lives in this VirtualService's route: keep it across the re-apply.
    from canary.actuators import apply_keeping_faults

    apply_keeping_faults(get_backend(), manifests)


def _decide(
    rollout: Rollout,
    *,
    actor: Any,
    kind: str,
    to_weight: int,
    reason: str,
    statistics: dict[str, Any] | None = None,
) -> RolloutDecision:
    """Record a state-changing decision: route traffic, store it, audit it, broadcast it."""
    if not can_decide_rollout(actor, kind):
        raise Forbidden(f"{actor} may not record a {kind} decision on a rollout")
    from_weight = rollout.weight
    if to_weight != from_weight or kind == "started":
        _route(rollout, to_weight, subsets=kind == "started")
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


def _failed_if_not_owned(
    rollout: Rollout, actor: Actor, statistics: dict[str, Any] | None = None
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
    _transition(rollout, RolloutStatus.FAILED)
    _decide(
        rollout,
        actor=actor,
        kind="failed",
        to_weight=rollout.weight,
        reason=refusal,
        statistics=statistics,
    )
    return True


def _start(rollout: Rollout, actor: Actor) -> str:
    if _failed_if_not_owned(rollout, actor):
        rollout.save()
        _after_commit(rollout, countdown=None)
        return "failed"
    _transition(rollout, RolloutStatus.RUNNING)
    first = analysis_steps(rollout)[0][0]
    _decide(
        rollout,
        actor=actor,
        kind="started",
        to_weight=first,
        reason=f"canary {rollout.canary_version} receives {first}% of traffic",
    )
    rollout.next_tick_at = timezone.now() + timedelta(seconds=rollout.tick_seconds)
    rollout.save()
    _after_commit(rollout, countdown=rollout.tick_seconds)
    return "started"


def _analyse(rollout: Rollout, tick: int, actor: Actor) -> str:
    from canary.metrics import read_windows

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
    if decision.action == ROLLBACK:
        _transition(rollout, RolloutStatus.ROLLED_BACK)
        _decide(
            rollout,
            actor=actor,
            kind="rolled_back",
            to_weight=0,
            reason=decision.reason,
            statistics=summary,
        )
    elif decision.action == PROMOTE:
        # A namespace that changed hands fails the rollout where it stands instead.
        if not _failed_if_not_owned(rollout, actor, summary):
            _transition(rollout, RolloutStatus.PROMOTED)
            _decide(
                rollout,
                actor=actor,
                kind="promoted",
                to_weight=100,
                reason=decision.reason,
                statistics=summary,
            )
    elif decision.action == INCONCLUSIVE:
        # Held at its weight: a person promotes anyway, aborts, retries or extends.
        _transition(rollout, RolloutStatus.INCONCLUSIVE)
        _decide(
            rollout,
            actor=actor,
            kind="inconclusive",
            to_weight=rollout.weight,
            reason=" ".join(p for p in (decision.reason + ".", decision.settle) if p),
            statistics=summary,
        )
    else:
        assert decision.action == CONTINUE
        next_weight = weight_at(analysis_steps(rollout), tick - rollout.analysis_start)
        if next_weight != rollout.weight and _failed_if_not_owned(rollout, actor, summary):
            rollout.save()
            _after_commit(rollout, countdown=None, last_tick=tick_row)
            return "failed"
        if next_weight != rollout.weight:
            _decide(
                rollout,
                actor=actor,
                kind="step_advanced",
                to_weight=next_weight,
                reason=f"no regression after {tick - rollout.analysis_start} ticks: "
                f"canary to {next_weight}%",
                statistics=summary,
            )
        rollout.next_tick_at = timezone.now() + timedelta(seconds=rollout.tick_seconds)
    rollout.save()
    _after_commit(rollout, countdown=rollout.tick_seconds, last_tick=tick_row)
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


def rollout_abort(*, actor: Actor, rollout: Rollout, reason: str = "") -> Rollout:
    """Stop a rollout and send all traffic back to the baseline (engineers of the team)."""
    if not can_manage_rollout(actor, rollout.service.team.slug):
        raise Forbidden("only engineers of the owning team abort its rollouts")
    with transaction.atomic():
        rollout = (
            Rollout.objects.select_for_update().select_related("service__team").get(pk=rollout.pk)
        )
        _transition(rollout, RolloutStatus.ABORTED)
        _decide(
            rollout,
            actor=actor,
            kind="aborted",
            to_weight=0,
            reason=reason or f"aborted by {actor}",
            statistics=rollout.analysis,
        )
        rollout.save()
        _after_commit(rollout, countdown=None)
    return rollout


def rollout_promote(*, actor: Actor, rollout: Rollout, reason: str = "") -> Rollout:
    """Promote by hand, overriding the analysis (approvers and platform admins)."""
    if not can_promote_rollout(actor):
        raise Forbidden("only approvers and platform admins promote by hand")
    with transaction.atomic():
        rollout = (
            Rollout.objects.select_for_update().select_related("service__team").get(pk=rollout.pk)
        )
        if rollout.status == RolloutStatus.PENDING:
            raise IllegalTransition(
                "the rollout has not started yet",
                extra={"from": rollout.status, "to": RolloutStatus.PROMOTED},
            )
        if rollout.status == RolloutStatus.INCONCLUSIVE and not reason.strip():
            # Promoting without the evidence is a person's call: it says why.
            raise InvalidInput(
                "promoting an inconclusive rollout needs a reason",
                extra={"fields": {"reason": ["say why the canary is promoted without evidence"]}},
            )
        _transition(rollout, RolloutStatus.PROMOTED)
        _decide(
            rollout,
            actor=actor,
            kind="promoted",
            to_weight=100,
            reason=reason or f"promoted by hand by {actor}",
            statistics=rollout.analysis,
        )
        rollout.save()
        _after_commit(rollout, countdown=None)
    return rollout


def observation_push(
    *,
    actor: Actor,
    rollout: Rollout,
    arm: str,
    requests: int,
    errors: int,
    latencies_ms: list[float] | None = None,
    observed_at: Any = None,
) -> Observation:
    """Store one arm's metrics for the next tick of a push-fed rollout.

    Refused whole (400, nothing stored): negative counts, errors above requests, more
    latency samples than requests, or a window ending no later than the arm's last one.
    """
    if not can_manage_rollout(actor, rollout.service.team.slug):
        raise Forbidden("only engineers of the owning team push its metrics")
    latencies_ms = latencies_ms or []
    # Counts past their PositiveIntegerField columns are field errors, not a database error.
    fields = column_errors(Observation, {"requests": requests, "errors": errors})
    if arm not in Arm.values:
        fields["arm"] = ["baseline or canary"]
    if not isinstance(requests, int) or isinstance(requests, bool) or requests < 0:
        fields["requests"] = ["a non-negative integer"]
    if not isinstance(errors, int) or isinstance(errors, bool) or errors < 0:
        fields["errors"] = ["a non-negative integer"]
    elif isinstance(requests, int) and errors > requests:
        fields["errors"] = ["cannot exceed requests"]
    if len(latencies_ms) > MAX_LATENCY_SAMPLES or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 1e9
        for v in latencies_ms
    ):
        fields["latencies_ms"] = [f"at most {MAX_LATENCY_SAMPLES} non-negative numbers"]
    elif isinstance(requests, int) and len(latencies_ms) > requests:
        fields["latencies_ms"] = ["at most one latency sample per request"]
    if observed_at is not None and (
        not hasattr(observed_at, "tzinfo") or observed_at.tzinfo is None
    ):
        fields["observed_at"] = ["a timezone-aware time"]
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


# --- the loop and the stream ------------------------------------------------------------


def rollouts_tick_due(*, now=None) -> int:
    """Enqueue the next tick of every active rollout that is due (the beat's safety net)."""
    now = now or timezone.now()
    due = Rollout.objects.filter(status__in=ACTIVE_STATUSES, next_tick_at__lte=now)
    count = 0
    for rollout_id, status, ticks_done in due.values_list("id", "status", "ticks_done"):
        tick = 0 if status == RolloutStatus.PENDING else ticks_done + 1
        _enqueue_tick(rollout_id, tick, countdown=0)
        count += 1
    return count


def _enqueue_tick(rollout_id: Any, tick: int, *, countdown: float | None) -> None:
    from canary.tasks import rollout_tick_task

    try:
        rollout_tick_task.apply_async((str(rollout_id), tick), countdown=countdown or 0)
    except Exception:  # noqa: BLE001 - the beat sweep enqueues it again; say so
        log.exception("could not enqueue tick %s of rollout %s", tick, rollout_id)


def _after_commit(
    rollout: Rollout, *, countdown: float | None, last_tick: RolloutTick | None = None
) -> None:
    """After commit: broadcast the new state and, if still active, schedule the next tick.

    The message is built inside the transaction from the rows in hand (what commits is
    what the dashboard sees), so the broadcast reads nothing back after the commit.
    """
    rollout_id, active, next_tick = rollout.pk, rollout.is_active, rollout.ticks_done + 1
    payload = _stream_payload(rollout, last_tick)

    def run() -> None:
        broadcast(rollout_id, payload)
        if active and countdown is not None:
            _enqueue_tick(rollout_id, next_tick, countdown=countdown)

    transaction.on_commit(run)


def _stream_payload(rollout: Rollout, last_tick: RolloutTick | None) -> dict[str, Any] | None:
    from channels.layers import get_channel_layer

    from canary.selectors import stream_update_of

    if get_channel_layer() is None:
        return None
    if last_tick is None and rollout.ticks_done:
        # A rollout that has analysed no tick has no tick row to show (ticks_done is 0).
        last_tick = rollout.ticks.order_by("-number").first()
    return stream_update_of(rollout, last_tick)


def broadcast(rollout_id: Any, payload: dict[str, Any] | None = None) -> None:
    """Send the rollout's latest state (read now unless given) to its websocket group."""
    from channels.layers import InMemoryChannelLayer, get_channel_layer

    from canary.selectors import rollout_stream_update

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if payload is None:
            payload = rollout_stream_update(rollout_id)
        message = {"type": "rollout.event", "payload": payload}
        if isinstance(layer, InMemoryChannelLayer):
            async_to_sync(layer.group_send)(group_name(rollout_id), message)
        else:
            # One long-lived loop: the Redis layer keeps its connection pool per event loop,
            # so a fresh loop per broadcast would open a fresh connection every tick.
            future = asyncio.run_coroutine_threadsafe(
                layer.group_send(group_name(rollout_id), message), _broadcast_loop()
            )
            future.result(timeout=5)
    except Exception:  # noqa: BLE001 - a dashboard outage must not fail the rollout; say so
        log.exception("broadcast for rollout %s failed", rollout_id)


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _broadcast_loop() -> asyncio.AbstractEventLoop:
    """The process's broadcast event loop, running in a daemon thread (started on first use)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="canary-broadcast", daemon=True).start()
        return _loop


def group_name(rollout_id: Any) -> str:
    """The channel-layer group of one rollout's dashboard."""
    return f"rollout-{rollout_id}"
