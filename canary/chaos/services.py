"""Chaos writes: experiments, fault leases (compare-and-swap with a fencing token), injection, revert.

Lease protocol (canary/chaos/leases.py has the arithmetic):

- `fault_lease_acquire`: a compare-and-swap on `ChaosLease.resource_version`;
  succeeds only when the lease is free, or lapsed for longer than
  lease_duration + max_clock_skew. Each acquisition starts a new term
  (`ChaosLease.transitions`), the fencing token every injection carries.
- `fault_lease_renew`: a conditional update on (holder, term).
- `fault_inject`: under a row lock on the lease, checks holder and term,
  writes the injection row (one unreverted per experiment, a database
  constraint) and only then applies the fault, so a crash at any point leaves
  a row the reaper can revert.
- `fault_revert`: deletes the fault's objects (idempotent) and marks the row.

The controller loop is canary/chaos/controller.py; the reaper, which reverts
every fault whose holder must have reverted, is canary/chaos/reaper.py.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.validators import validate_slug
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from prometheus_client import Counter

from audit import record
from canary.chaos import actuators
from canary.chaos.leases import (
    LeaseTimingError,
    LeaseTimings,
    is_expired,
    may_acquire,
)
from canary.chaos.models import (
    EXPERIMENT_TRANSITIONS,
    ChaosExperiment,
    ChaosInjection,
    ChaosLease,
    ExperimentStatus,
    FaultKind,
    InjectionState,
)
from canary.chaos.selectors import live_injection_of, timings_of
from canary.ownership import InvalidHost, namespace_owner, require_service_host
from kiln.cluster import LeaseConflict, LeaseMirror
from kiln.columns import check_columns, column_errors
from kiln.errors import (
    Conflict,
    Forbidden,
    IllegalTransition,
    InvalidInput,
    Unavailable,
)
from kiln.identity.permissions import (
    Actor,
    can_control_chaos,
    can_revert_fault,
    can_run_chaos,
    system_actor,
)

log = logging.getLogger("kiln.chaos")

FAULTS_INJECTED = Counter("kiln_chaos_faults_injected_total", "Chaos faults injected", ["fault"])
FAULTS_REVERTED = Counter(
    "kiln_chaos_faults_reverted_total", "Chaos faults reverted", ["fault", "by"]
)

STOP_CONDITION_KINDS = ("error-rate-above", "latency-p99-above-ms", "canary-rolled-back")
MAX_HARD_SECONDS = 24 * 3600


class LeaseNotHeld(Conflict):
    """The caller does not (or no longer) hold the experiment's lease."""

    code = "lease_not_held"


class ChaosInvalid(InvalidInput):
    """An experiment definition that Kiln refuses to run."""

    code = "chaos_invalid"


def current_timings() -> LeaseTimings:
    """Lease timings from settings; misconfigured timings make chaos unavailable rather than unsafe."""
    try:
        return LeaseTimings(
            lease_duration=settings.KILN_CHAOS_LEASE_DURATION,
            renew_deadline=settings.KILN_CHAOS_RENEW_DEADLINE,
            retry_period=settings.KILN_CHAOS_RETRY_PERIOD,
            max_clock_skew=settings.KILN_CHAOS_MAX_CLOCK_SKEW,
            revert_budget=settings.KILN_CHAOS_REVERT_BUDGET,
        )
    except LeaseTimingError as exc:
        raise Unavailable(f"chaos lease timings are unsafe: {exc}") from exc


def delivery_backend(backend: Any = None) -> Any:
    """The backend passed in, or the configured delivery backend."""
    if backend is not None:
        return backend
    from kiln.cluster.backends import get_backend

    return get_backend()


def fault_spec(exp: ChaosExperiment) -> actuators.FaultSpec:
    """The actuator's view of an experiment."""
    return actuators.FaultSpec(
        experiment_id=str(exp.pk),
        namespace=exp.namespace,
        selector=dict(exp.selector),
        fault=exp.fault,
        service=exp.service,
        delay_ms=exp.delay_ms,
        abort_http_status=exp.abort_http_status,
        percent=exp.percent,
        max_duration_seconds=exp.max_duration_seconds,
        max_pods=exp.max_pods,
        max_percent=exp.max_percent,
    )


# --- experiments -----------------------------------------------------------------------------


def _validate(data: dict[str, Any]) -> dict[str, str]:
    errors: dict[str, str] = {}
    name = data.get("name") or ""
    if not isinstance(name, str) or not (1 <= len(name.strip()) <= 100):
        errors["name"] = "1 to 100 characters"
    ns = data.get("namespace") or ""
    try:
        validate_slug(ns)
        # ns != ns.lower(), not `not ns.islower()`: an all-digit label ("0") has no case at all.
        if ns != ns.lower() or len(ns) > 63 or "_" in ns:
            raise ValueError
    except Exception:  # noqa: BLE001 - any failure is the same answer
        errors["namespace"] = "a DNS-1123 label"
    selector = data.get("selector")
    if (
        not isinstance(selector, dict)
        or not selector
        or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in selector.items()
        )
    ):
        errors["selector"] = (
            "non-empty matchLabels (string keys and values): never the whole namespace"
        )
    fault = data.get("fault")
    if fault not in FaultKind.values:
        errors["fault"] = f"one of {', '.join(FaultKind.values)}"
    if fault in (FaultKind.HTTP_DELAY, FaultKind.HTTP_ABORT):
        if not data.get("service"):
            errors["service"] = "the target service host is required for HTTP faults"
        percent = data.get("percent", 100.0)
        if not isinstance(percent, int | float) or not (0 < percent <= 100):
            errors["percent"] = "a share of requests in (0, 100]"
    if fault == FaultKind.HTTP_DELAY:
        delay = data.get("delay_ms")
        if not isinstance(delay, int) or not (1 <= delay <= 600_000):
            errors["delay_ms"] = "1 to 600000 milliseconds"
    if fault == FaultKind.HTTP_ABORT:
        status = data.get("abort_http_status")
        if not isinstance(status, int) or not (400 <= status <= 599):
            errors["abort_http_status"] = "an HTTP status 400-599"
    duration = data.get("duration_seconds")
    hard = data.get("max_duration_seconds")
    if not isinstance(duration, int) or duration < 1:
        errors["duration_seconds"] = "a positive number of seconds"
    if not isinstance(hard, int) or hard < 1 or hard > MAX_HARD_SECONDS:
        errors["max_duration_seconds"] = f"1 to {MAX_HARD_SECONDS} seconds"
    elif isinstance(duration, int) and hard < duration:
        errors["max_duration_seconds"] = "must not be shorter than duration_seconds"
    max_pods = data.get("max_pods")
    max_percent = data.get("max_percent")
    if max_pods is None and max_percent is None:
        errors["blast_radius"] = "set max_pods or max_percent"
    if max_pods is not None and (not isinstance(max_pods, int) or max_pods < 1):
        errors["max_pods"] = "at least 1"
    if max_percent is not None and (
        not isinstance(max_percent, int | float) or not (0 < max_percent <= 100)
    ):
        errors["max_percent"] = "a percentage in (0, 100]"
    conds = data.get("stop_conditions") or []
    if not isinstance(conds, list):
        errors["stop_conditions"] = "a list"
    else:
        for i, cond in enumerate(conds):
            kind = cond.get("kind") if isinstance(cond, dict) else None
            if kind not in STOP_CONDITION_KINDS:
                errors[f"stop_conditions[{i}]"] = (
                    f"kind is one of {', '.join(STOP_CONDITION_KINDS)}"
                )
            elif kind != "canary-rolled-back":
                threshold = cond.get("threshold")
                if not isinstance(threshold, int | float) or threshold < 0:
                    errors[f"stop_conditions[{i}]"] = "needs a non-negative threshold"
    return errors


def experiment_create(
    *, actor: Actor, data: dict[str, Any], start: bool = True, backend: Any = None
) -> ChaosExperiment:
    """Define (and by default start) an experiment on a namespace the actor's team owns; audited."""
    from kiln.identity.models import Team

    # Values past their columns' ranges (max_pods > 2**31-1, ...) are field errors too.
    columns = column_errors(ChaosExperiment, data)
    errors = {**{k: "; ".join(v) for k, v in columns.items()}, **_validate(data)}
    if errors:
        raise ChaosInvalid("The experiment is invalid.", extra={"fields": errors})
    timings = current_timings()
    team_slug = namespace_owner(data["namespace"], delivery_backend(backend))
    if team_slug is None:
        raise ChaosInvalid(
            f"namespace {data['namespace']} is not known to the cluster or has no owning team",
            extra={"fields": {"namespace": "no Namespace with a kiln.dev/team label"}},
        )
    if not can_run_chaos(actor, team_slug):
        raise Forbidden("Only engineers of the owning team or platform admins run chaos here.")
    team = Team.objects.filter(slug=team_slug).first()
    if team is None:
        raise ChaosInvalid(f"team {team_slug} owning {data['namespace']} does not exist")
    service = data.get("service") or ""
    if service:
        # A VirtualService applies to its hosts across the mesh: an HTTP fault may only
        # name a service of the experiment's own namespace (stored fully qualified).
        try:
            service = require_service_host(service, data["namespace"], field="service")
        except InvalidHost as exc:
            raise ChaosInvalid(exc.message, extra=exc.extra) from None
    with transaction.atomic():
        exp = ChaosExperiment.objects.create(
            name=data["name"].strip(),
            team=team,
            namespace=data["namespace"],
            selector=data["selector"],
            service=service,
            fault=data["fault"],
            delay_ms=data.get("delay_ms"),
            abort_http_status=data.get("abort_http_status"),
            percent=float(data.get("percent", 100.0)),
            duration_seconds=data["duration_seconds"],
            max_duration_seconds=data["max_duration_seconds"],
            max_pods=data.get("max_pods"),
            max_percent=data.get("max_percent"),
            stop_conditions=data.get("stop_conditions") or [],
            lease_duration=timings.lease_duration,
            renew_deadline=timings.renew_deadline,
            retry_period=timings.retry_period,
            max_clock_skew=timings.max_clock_skew,
            revert_budget=timings.revert_budget,
            created_by_id=actor.user_id,
            created_by_name=actor.username,
        )
        ChaosLease.objects.create(experiment=exp)
        record(actor, "chaos.experiment.created", exp, _experiment_data(exp))
        if start:
            _transition(exp, ExperimentStatus.RUNNING, actor=actor, reason="started at creation")
    return exp


def _experiment_data(exp: ChaosExperiment) -> dict[str, Any]:
    return {
        "name": exp.name,
        "team": exp.team.slug,
        "namespace": exp.namespace,
        "selector": exp.selector,
        "service": exp.service,
        "fault": exp.fault,
        "delay_ms": exp.delay_ms,
        "abort_http_status": exp.abort_http_status,
        "percent": exp.percent,
        "duration_seconds": exp.duration_seconds,
        "max_duration_seconds": exp.max_duration_seconds,
        "max_pods": exp.max_pods,
        "max_percent": exp.max_percent,
        "stop_conditions": exp.stop_conditions,
        "lease_duration": exp.lease_duration,
        "renew_deadline": exp.renew_deadline,
        "retry_period": exp.retry_period,
    }


_VERBS = {
    ExperimentStatus.RUNNING: "started",
    ExperimentStatus.COMPLETED: "completed",
    ExperimentStatus.ABORTED: "aborted",
    ExperimentStatus.EXPIRED: "expired",
}


def _transition(exp: ChaosExperiment, to: str, *, actor: Any, reason: str) -> None:
    """Move an experiment along EXPERIMENT_TRANSITIONS inside the caller's transaction; audited."""
    current = (
        ChaosExperiment.objects.select_for_update().values_list("status", flat=True).get(pk=exp.pk)
    )
    if to not in EXPERIMENT_TRANSITIONS[current]:
        raise IllegalTransition(f"an experiment cannot go from {current} to {to}")
    now = timezone.now()
    fields: dict[str, Any] = {"status": to}
    if to == ExperimentStatus.RUNNING:
        fields["started_at"] = now
    else:
        fields["ended_at"] = now
        fields["end_reason"] = reason[:300]
    ChaosExperiment.objects.filter(pk=exp.pk).update(**fields)
    for k, v in fields.items():
        setattr(exp, k, v)
    record(actor, f"chaos.experiment.{_VERBS[to]}", exp, {"from": current, "reason": reason})
    if to == ExperimentStatus.RUNNING:
        exp_id = str(exp.pk)
        transaction.on_commit(lambda: _enqueue_controller(exp_id))


def _enqueue_controller(experiment_id: str) -> None:
    if not getattr(settings, "KILN_CHAOS_AUTORUN", True):
        return
    try:
        from canary.chaos.tasks import chaos_run_controller

        chaos_run_controller.delay(experiment_id)
    except Exception:  # noqa: BLE001 - the broker being down must not undo the start; say so
        log.exception("could not enqueue the chaos controller for %s", experiment_id)


def experiment_end(
    *, experiment_id: Any, to: str, actor: Any, reason: str, backend: Any = None
) -> bool:
    """End an experiment (completed, aborted, expired) and revert its live fault; False if already ended."""
    with transaction.atomic():
        # Lease first, then experiment: the same lock order as fault_inject.
        ChaosLease.objects.select_for_update().filter(pk=experiment_id).first()
        exp = ChaosExperiment.objects.select_related("team").get(pk=experiment_id)
        if not can_revert_fault(actor, exp.team.slug):
            raise Forbidden(f"{actor} may not end experiments of team {exp.team.slug}")
        if exp.is_terminal:
            return False
        _transition(exp, to, actor=actor, reason=reason)
    live = live_injection_of(experiment_id)
    if live is not None:
        fault_revert(
            injection_id=live.pk, actor=actor, reason=f"experiment {to}: {reason}", backend=backend
        )
    return True


def experiment_abort(
    *, actor: Actor, experiment: ChaosExperiment, reason: str = "", backend: Any = None
) -> ChaosExperiment:
    """Abort by hand (owning team's engineers, platform admins): stop and revert now; audited."""
    if not can_run_chaos(actor, experiment.team.slug):
        raise Forbidden(
            "Only engineers of the owning team or platform admins abort this experiment."
        )
    if experiment.is_terminal:
        raise IllegalTransition(f"the experiment is already {experiment.status}")
    check_columns(ChaosExperiment, {"end_reason": reason})  # NUL, or past 300 characters
    ended = experiment_end(
        experiment_id=experiment.pk,
        to=ExperimentStatus.ABORTED,
        actor=actor,
        reason=reason or f"aborted by {actor.username}",
        backend=backend,
    )
    if not ended:
        raise IllegalTransition("the experiment already ended")
    experiment.refresh_from_db()
    return experiment


# --- leases ----------------------------------------------------------------------------------

CONTROLLER = system_actor("chaos-controller")


def _need_control(actor: Actor) -> None:
    """Leases and injection are the chaos controller's job alone (`chaos.control`)."""
    if not can_control_chaos(actor):
        raise Forbidden(f"{actor} may not hold chaos leases or inject faults")


def _cluster_lease(exp_id: Any) -> LeaseMirror | None:
    """The cluster-side Lease mirroring the database lease, where the backend keeps one."""
    return delivery_backend().lease_mirror(
        namespace=settings.KILN_CHAOS_LEASE_NAMESPACE, name=f"kiln-chaos-{exp_id}"
    )


def fault_lease_acquire(
    *, experiment_id: Any, holder: str, now: datetime | None = None, actor: Actor = CONTROLLER
) -> int | None:
    """Take the lease if free or lapsed (CAS on resource_version); returns the new term or None."""
    _need_control(actor)
    now = now or timezone.now()
    exp = ChaosExperiment.objects.get(pk=experiment_id)
    timings = timings_of(exp)
    lease = ChaosLease.objects.get(pk=experiment_id)
    if lease.holder and lease.holder != holder and not is_expired(lease.renewed_at, now, timings):
        return None
    if not may_acquire(lease.holder, lease.renewed_at, holder, now, timings):
        return None
    term = lease.transitions + 1
    with transaction.atomic():
        won = ChaosLease.objects.filter(
            pk=experiment_id, resource_version=lease.resource_version
        ).update(
            holder=holder,
            resource_version=F("resource_version") + 1,
            acquired_at=now,
            renewed_at=now,
            renewals=0,
            transitions=term,
        )
        if not won:
            return None
        kube = _cluster_lease(experiment_id)
        if kube is not None:
            try:
                kube.write(
                    holder=holder,
                    lease_duration=timings.lease_duration,
                    acquire_time=now,
                    renew_time=now,
                    transitions=term,
                    expected_holder=lease.holder or None,
                )
            except LeaseConflict:
                transaction.set_rollback(True)
                return None
        record(
            actor,
            "chaos.lease.acquired",
            exp,
            {"holder": holder, "previous_holder": lease.holder, "term": term},
        )
    return term


def fault_lease_renew(
    *,
    experiment_id: Any,
    holder: str,
    term: int,
    now: datetime | None = None,
    actor: Actor = CONTROLLER,
) -> bool:
    """Renew the lease if `holder` still holds term `term`; False once it is lost."""
    _need_control(actor)
    now = now or timezone.now()
    with transaction.atomic():
        won = ChaosLease.objects.filter(pk=experiment_id, holder=holder, transitions=term).update(
            renewed_at=now, renewals=F("renewals") + 1, resource_version=F("resource_version") + 1
        )
        if not won:
            return False
        kube = _cluster_lease(experiment_id)
        if kube is not None:
            lease = ChaosLease.objects.get(pk=experiment_id)
            exp = ChaosExperiment.objects.get(pk=experiment_id)
            try:
                kube.write(
                    holder=holder,
                    lease_duration=exp.lease_duration,
                    acquire_time=lease.acquired_at or now,
                    renew_time=now,
                    transitions=term,
                    expected_holder=holder,
                )
            except LeaseConflict:
                transaction.set_rollback(True)
                return False
    return True


def fault_lease_release(
    *, experiment_id: Any, holder: str, term: int, actor: Actor = CONTROLLER
) -> bool:
    """Give the lease up (after reverting); audited. False if it was not held."""
    _need_control(actor)
    with transaction.atomic():
        won = ChaosLease.objects.filter(pk=experiment_id, holder=holder, transitions=term).update(
            holder="", renewed_at=None, resource_version=F("resource_version") + 1
        )
        if not won:
            return False
        kube = _cluster_lease(experiment_id)
        if kube is not None:
            try:
                kube.delete()
            except Exception:  # noqa: BLE001 - an orphan Lease only delays the next acquire
                log.warning("could not delete the Kubernetes Lease of %s", experiment_id)
        exp = ChaosExperiment.objects.get(pk=experiment_id)
        record(
            actor,
            "chaos.lease.released",
            exp,
            {"holder": holder, "term": term},
        )
    return True


# --- injection and revert ---------------------------------------------------------------------


def _planned_refs(spec: actuators.FaultSpec, token: int) -> list[dict[str, Any]]:
    if spec.fault == FaultKind.POD_KILL:
        api_version, kind = actuators.CHAOS_API_PODCHAOS, "PodChaos"
    else:
        api_version, kind = actuators.CHAOS_API_VS, "VirtualService"
    return [
        {
            "apiVersion": api_version,
            "kind": kind,
            "namespace": spec.namespace,
            "name": actuators.object_name(spec, token),
            # The owner lets a revert of these planned refs also take out a merged fault.
            "experiment": spec.experiment_id,
            "token": int(token),
        }
    ]


def fault_inject(
    *, experiment_id: Any, holder: str, term: int, backend: Any = None, actor: Actor = CONTROLLER
) -> ChaosInjection:
    """Apply the fault under the lease term `term`; idempotent for the same holder and term."""
    _need_control(actor)
    backend = delivery_backend(backend)
    with transaction.atomic():
        lease = ChaosLease.objects.select_for_update().get(pk=experiment_id)
        exp = ChaosExperiment.objects.select_related("team").get(pk=experiment_id)
        if lease.holder != holder or lease.transitions != term:
            raise LeaseNotHeld(f"{holder} does not hold term {term} of the lease")
        if exp.status != ExperimentStatus.RUNNING:
            raise IllegalTransition(f"the experiment is {exp.status}, not running")
        if namespace_owner(exp.namespace, backend) != exp.team.slug:
            # The namespace changed hands since the experiment was defined: inject nothing there.
            raise Conflict(
                f"namespace {exp.namespace} no longer belongs to team {exp.team.slug}",
                extra={"reason": "namespace_not_owned"},
            )
        live = live_injection_of(experiment_id)
        if live is not None:
            if live.holder == holder and live.fencing_token == term:
                return live
            raise Conflict("another injection of this experiment is still live")
        spec = fault_spec(exp)
        try:
            with transaction.atomic():
                injection = ChaosInjection.objects.create(
                    experiment=exp,
                    holder=holder,
                    fencing_token=term,
                    state=InjectionState.INJECTING,
                    applied=_planned_refs(spec, term),
                )
        except IntegrityError as exc:
            raise Conflict("another injection of this experiment is still live") from exc
    try:
        result = actuators.inject(backend, spec, term)
    except Exception as exc:
        fault_revert(
            injection_id=injection.pk,
            actor=actor,
            reason="inject failed",
            backend=backend,
        )
        if isinstance(exc, actuators.FaultConflict):
            # Another experiment holds that fault kind on the host's routes: try again later.
            raise Conflict(str(exc), extra={"reason": "fault_conflict"}) from exc
        raise
    with transaction.atomic():
        marked = ChaosInjection.objects.filter(pk=injection.pk, reverted_at__isnull=True).update(
            state=InjectionState.ACTIVE,
            injected_at=timezone.now(),
            applied=result.applied,
            targets=result.targets,
        )
        if marked:
            record(
                actor,
                "chaos.fault.injected",
                exp,
                {
                    "injection": injection.pk,
                    "holder": holder,
                    "term": term,
                    "fault": exp.fault,
                    "objects": result.applied,
                    "targets": result.targets,
                },
            )
    if not marked:
        # Reverted (abort, reaper) while we applied: take back what we just wrote.
        actuators.revert(backend, result.applied)
        raise LeaseNotHeld("the injection was reverted while it was being applied")
    FAULTS_INJECTED.labels(exp.fault).inc()
    injection.refresh_from_db()
    return injection


def fault_revert(*, injection_id: int, actor: Any, reason: str, backend: Any = None) -> bool:
    """Remove an injection's objects and mark it reverted; idempotent (False if already reverted)."""
    injection = ChaosInjection.objects.select_related("experiment__team").get(pk=injection_id)
    if not can_revert_fault(actor, injection.experiment.team.slug):
        raise Forbidden(f"{actor} may not revert faults of team {injection.experiment.team.slug}")
    if injection.reverted_at is not None:
        return False
    actuators.revert(delivery_backend(backend), injection.applied)
    by = actor if isinstance(actor, str) else getattr(actor, "username", str(actor))
    with transaction.atomic():
        marked = ChaosInjection.objects.filter(pk=injection_id, reverted_at__isnull=True).update(
            state=InjectionState.REVERTED,
            reverted_at=timezone.now(),
            reverted_by=by[:200],
            revert_reason=reason[:300],
        )
        if marked:
            record(
                actor,
                "chaos.fault.reverted",
                injection.experiment,
                {
                    "injection": injection.pk,
                    "holder": injection.holder,
                    "term": injection.fencing_token,
                    "reason": reason,
                },
            )
    if marked:
        FAULTS_REVERTED.labels(injection.experiment.fault, by.split(":")[0]).inc()
    return bool(marked)
