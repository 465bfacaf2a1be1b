"""Experiments: define (validated, on a namespace the actor's team owns), start, end, abort; audited.

An experiment moves along `EXPERIMENT_TRANSITIONS` (canary/chaos/models.py); starting
it queues its controller (canary/chaos/controller.py) once the transaction commits;
ending it reverts its live fault (services/injection.py). The reaper
(canary/chaos/reaper.py) ends experiments nobody finishes.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.validators import validate_slug
from django.db import transaction
from django.utils import timezone

from audit import record
from canary.chaos import stops
from canary.chaos.kinds import kind_errors
from canary.chaos.leases import TIMING_FIELDS, LeaseTimingError, LeaseTimings
from canary.chaos.models import (
    EXPERIMENT_TRANSITIONS,
    HTTP_FAULTS,
    ChaosExperiment,
    ChaosLease,
    ExperimentStatus,
    FaultKind,
)
from canary.chaos.selectors import live_injection_of
from canary.chaos.services.backend import delivery_backend
from canary.chaos.services.injection import fault_revert
from canary.chaos.services.leases import ExperimentId
from canary.chaos.services.levers import experiment_notice
from canary.ownership import (
    InvalidHost,
    namespace_in_cluster,
    namespace_owner,
    require_service_host,
)
from kiln import changes
from kiln.celery import app
from kiln.cluster.labels import selector_problem
from kiln.columns import check_columns, column_errors
from kiln.errors import Forbidden, IllegalTransition, InvalidInput, Unavailable
from kiln.identity.permissions import Actor, can_revert_fault, can_run_chaos
from kiln.params import INT_MAX, real_number

log = logging.getLogger("kiln.chaos")

STOP_CONDITION_KINDS = stops.KINDS  # judged by canary/chaos/stops.py
MAX_HARD_SECONDS = 24 * 3600
NO_OWNER = "no Namespace with a kiln.dev/team label"
# An environment's namespace is its team's from the request on, but a fault needs its pods.
NOT_IN_CLUSTER = "not in the cluster yet: its environment is waiting for approval or provisioning"
# One wording for the API (field `blast_radius`) and the form (on its blast radius fields).
BLAST_RADIUS_REQUIRED = (
    "give a blast radius: a maximum number of pods (max_pods), a maximum percentage of the "
    "matching pods (max_percent), or both"
)
# Queued by name: the task module runs the controller, which calls these services, so an
# import of it here would close a circle. ChaosConfig.ready registers it in every process.
CONTROLLER_TASK = "chaos.tasks.chaos_run_controller"


class ChaosInvalid(InvalidInput):
    """An experiment definition that Kiln refuses to run."""

    code = "chaos_invalid"


def current_timings() -> LeaseTimings:
    """Lease timings from settings; misconfigured timings make chaos unavailable rather than unsafe."""
    try:
        return LeaseTimings(
            **{name: getattr(settings, f"KILN_CHAOS_{name.upper()}") for name in TIMING_FIELDS}
        )
    except LeaseTimingError as exc:
        raise Unavailable(f"chaos lease timings are unsafe: {exc}") from exc


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
    if problem := selector_problem(data.get("selector")):
        errors["selector"] = problem
    fault = data.get("fault")
    if fault not in FaultKind.values:
        errors["fault"] = f"one of {', '.join(FaultKind.values)}"
    if fault in HTTP_FAULTS:
        if not data.get("service"):
            errors["service"] = "the target service host is required for HTTP faults"
        percent = data.get("percent", 100.0)
        if (share := real_number(percent)) is None or not (0 < share <= 100):
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
    if (
        isinstance(duration, bool)
        or not isinstance(duration, int)
        or not (1 <= duration <= MAX_HARD_SECONDS)
    ):
        errors["duration_seconds"] = (
            f"1 to {MAX_HARD_SECONDS} seconds, and at most the hard maximum"
        )
    if not isinstance(hard, int) or hard < 1 or hard > MAX_HARD_SECONDS:
        errors["max_duration_seconds"] = f"1 to {MAX_HARD_SECONDS} seconds"
    elif "duration_seconds" not in errors and hard < duration:
        errors["max_duration_seconds"] = "must not be shorter than duration_seconds"
    max_pods = data.get("max_pods")
    max_percent = data.get("max_percent")
    if max_pods is None and max_percent is None:
        errors["blast_radius"] = BLAST_RADIUS_REQUIRED
    if max_pods is not None and (
        isinstance(max_pods, bool) or not isinstance(max_pods, int) or not 1 <= max_pods <= INT_MAX
    ):
        # One range for both ends: the column's own (0 to INT_MAX) would contradict "at least 1".
        errors["max_pods"] = f"an integer from 1 to {INT_MAX}"
    if max_percent is not None and (
        (share := real_number(max_percent)) is None or not (0 < share <= 100)
    ):
        errors["max_percent"] = "a percentage in (0, 100]"
    # The Chaos Mesh kinds' magnitude, blast-radius cap and hard maximum (canary/chaos/kinds.py).
    for key, message in kind_errors(data).items():
        errors.setdefault(key, message)
    for flag in ("may_overlap", "continue_without_metrics"):
        if not isinstance(data.get(flag, False), bool):
            errors[flag] = "true or false"
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
                if real_number(threshold) is None or threshold < 0:
                    errors[f"stop_conditions[{i}]"] = "needs a non-negative threshold"
                elif kind == "error-rate-above" and threshold >= 1:
                    # A share of requests: at 1 or above it could never trip, and the
                    # experiment would run with no stop at all.
                    errors[f"stop_conditions[{i}]"] = (
                        "an error rate is a share of requests below 1 (0.05 is 5%)"
                    )
                elif not data.get("service"):
                    # Read from the service's metrics: without one it could never be checked,
                    # and the experiment would stop the moment it started.
                    errors[f"stop_conditions[{i}]"] = (
                        "error rate and latency are read from the experiment's service: "
                        "name its host in Service"
                    )
    return errors


def experiment_errors(*, actor: Actor, data: dict[str, Any], backend: Any = None) -> dict[str, str]:
    """Every field problem of an experiment definition, empty when `experiment_create` may
    run it: the definition's own rules and, for a well-formed namespace, that the cluster
    knows it and the actor may run chaos there (so a form names them all in one round).

    `experiment_create` answers the last one with a 403 instead: an API caller asked for
    something it may not do, a person filling a form picked the wrong namespace.
    """
    columns = column_errors(ChaosExperiment, data)
    errors = {**{k: "; ".join(v) for k, v in columns.items()}, **_validate(data)}
    if "namespace" not in errors:
        team_slug = namespace_owner(data["namespace"], delivery_backend(backend))
        if team_slug is None:
            errors["namespace"] = NO_OWNER
        elif not can_run_chaos(actor, team_slug):
            errors["namespace"] = "not a namespace your team owns"
        elif not namespace_in_cluster(data["namespace"], delivery_backend(backend)):
            errors["namespace"] = NOT_IN_CLUSTER
    if data.get("service") and "namespace" not in errors and "service" not in errors:
        try:
            require_service_host(data["service"], data["namespace"], field="service")
        except InvalidHost as exc:
            errors["service"] = "; ".join(exc.extra["fields"]["service"])
    return errors


_VERBS = {
    ExperimentStatus.RUNNING: "started",
    ExperimentStatus.COMPLETED: "completed",
    ExperimentStatus.ABORTED: "aborted",
    ExperimentStatus.EXPIRED: "expired",
}


def _transition(
    exp: ChaosExperiment,
    to: str,
    *,
    actor: Actor,
    reason: str,
    evidence: dict[str, Any] | None = None,
) -> None:
    """Move an experiment along EXPERIMENT_TRANSITIONS inside the caller's transaction; audited.

    `evidence`: what ended it, as data (the stop condition and the value read, the lever),
    stored on the experiment and in the audit event. Once ended, its controller is woken
    after the commit (a change notice) to revert its fault without waiting for its next renewal.
    """
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
        fields["end_evidence"] = evidence or {}
    ChaosExperiment.objects.filter(pk=exp.pk).update(**fields)
    for k, v in fields.items():
        setattr(exp, k, v)
    data: dict[str, Any] = {"from": current, "reason": reason}
    if evidence:
        data["evidence"] = evidence
    record(actor, f"chaos.experiment.{_VERBS[to]}", exp, data)
    if to != ExperimentStatus.RUNNING:
        changes.notify_after_commit(experiment_notice(exp.pk))
    if to == ExperimentStatus.RUNNING:
        exp_id = str(exp.pk)
        transaction.on_commit(lambda: _enqueue_controller(exp_id))


def _abort_locked(
    experiments: list[ChaosExperiment], *, actor: Actor, reason: str, evidence: dict[str, Any]
) -> None:
    """Abort running experiments together (a safety lever) inside the caller's transaction, their
    rows locked by the caller: one UPDATE for all, then the event `_transition` records for each.
    Their controllers are woken by the caller's notice."""
    now = timezone.now()
    ChaosExperiment.objects.filter(
        pk__in=[exp.pk for exp in experiments], status=ExperimentStatus.RUNNING
    ).update(
        status=ExperimentStatus.ABORTED,
        ended_at=now,
        end_reason=reason[:300],
        end_evidence=evidence,
    )
    data = {"from": ExperimentStatus.RUNNING, "reason": reason, "evidence": evidence}
    for exp in experiments:
        exp.status, exp.ended_at, exp.end_reason = ExperimentStatus.ABORTED, now, reason[:300]
        exp.end_evidence = evidence
        record(actor, f"chaos.experiment.{_VERBS[ExperimentStatus.ABORTED]}", exp, data)


def controllers_resume() -> int:
    """Queue a controller for every running experiment (standalone's start: its controllers
    stopped with it); returns how many. One that finds another holding the lease waits for it."""
    running = ChaosExperiment.objects.filter(status=ExperimentStatus.RUNNING)
    ids = [str(pk) for pk in running.order_by("created_at").values_list("pk", flat=True)]
    for experiment_id in ids:
        _enqueue_controller(experiment_id)
    return len(ids)


def _enqueue_controller(experiment_id: str) -> None:
    if not getattr(settings, "KILN_CHAOS_AUTORUN", True):
        return
    try:
        app.tasks[CONTROLLER_TASK].delay(experiment_id)
    except Exception:  # noqa: BLE001 - the broker being down must not undo the start; say so
        log.exception("could not enqueue the chaos controller for %s", experiment_id)


def experiment_end(
    *,
    experiment_id: ExperimentId,
    to: str,
    actor: Actor,
    reason: str,
    backend: Any = None,
    evidence: dict[str, Any] | None = None,
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
        _transition(exp, to, actor=actor, reason=reason, evidence=evidence)
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
