"""Creating an experiment: validated, admitted (no engaged lever, no overlap, one per
Idempotency-Key; services/admission.py), inserted with its lease row, audited, started.

Validation and the lifecycle (transitions, end, abort) are services/experiments.py.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit import record
from canary.chaos.kinds import kind_params
from canary.chaos.models import ChaosExperiment, ChaosLease, ExperimentStatus
from canary.chaos.services import admission
from canary.chaos.services.backend import delivery_backend
from canary.chaos.services.experiments import (
    NO_OWNER,
    NOT_IN_CLUSTER,
    ChaosInvalid,
    _transition,
    _validate,
    current_timings,
)
from canary.chaos.services.levers import lever_require_released
from canary.ownership import (
    InvalidHost,
    namespace_in_cluster,
    namespace_owner,
    require_service_host,
)
from kiln.columns import column_errors
from kiln.errors import Forbidden
from kiln.identity.models import Team
from kiln.identity.permissions import Actor, can_run_chaos


def experiment_create(*, actor: Actor, data: dict[str, Any], **options: Any) -> ChaosExperiment:
    """Define (and by default start) an experiment on a namespace the actor's team owns; audited.

    `options` are `experiment_submit`'s: start, backend, idempotency_key.
    """
    return experiment_submit(actor=actor, data=data, **options)[0]


def experiment_submit(
    *,
    actor: Actor,
    data: dict[str, Any],
    start: bool = True,
    backend: Any = None,
    idempotency_key: str = "",
) -> tuple[ChaosExperiment, bool]:
    """`experiment_create`, returning (experiment, created): an Idempotency-Key this actor used
    before with the same definition returns that experiment, created False (services/admission.py).

    Refused with a 409 while a safety lever covers the namespace's team, or when the target
    overlaps another running or scheduled experiment's and the two do not both allow it.
    """
    # Values past their columns' ranges (max_pods > 2**31-1, ...) are field errors too.
    columns = column_errors(ChaosExperiment, data)
    errors = {**{k: "; ".join(v) for k, v in columns.items()}, **_validate(data)}
    if errors:
        raise ChaosInvalid("The experiment is invalid.", extra={"fields": errors})
    key = admission.check_key(idempotency_key)
    digest = admission.definition_hash(data)
    previous = admission.experiment_for_key(actor=actor, key=key, digest=digest)
    if previous is not None:
        return previous, False
    current_timings()  # unsafe timings: 503 before anything is read or written
    team_slug = namespace_owner(data["namespace"], delivery_backend(backend))
    if team_slug is None:
        raise ChaosInvalid(
            f"namespace {data['namespace']} is not known to the cluster or has no owning team",
            extra={"fields": {"namespace": NO_OWNER}},
        )
    if not can_run_chaos(actor, team_slug):
        raise Forbidden("Only engineers of the owning team or platform admins run chaos here.")
    if not namespace_in_cluster(data["namespace"], delivery_backend(backend)):
        raise ChaosInvalid(
            f"namespace {data['namespace']} is {NOT_IN_CLUSTER}",
            extra={"fields": {"namespace": NOT_IN_CLUSTER}},
        )
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
    try:
        return _insert(
            actor=actor, data=data, team=team, service=service, start=start, key=key, digest=digest
        )
    except IntegrityError:
        # The same key committed by a concurrent submission of the same form.
        previous = admission.experiment_for_key(actor=actor, key=key, digest=digest)
        if previous is None:
            raise
        return previous, False


def _insert(
    *,
    actor: Actor,
    data: dict[str, Any],
    team: Team,
    service: str,
    start: bool,
    key: str,
    digest: str,
) -> tuple[ChaosExperiment, bool]:
    """Admit and insert an experiment in one transaction: levers locked and checked, overlaps
    looked up under that lock (services/admission.py), then the rows and their audit events.

    A submission of the same key that committed while this one waited for the lock is this
    one's answer (created False): it would otherwise overlap itself.
    """
    timings = current_timings()
    with transaction.atomic():
        lever_require_released(team=team)
        previous = admission.experiment_for_key(actor=actor, key=key, digest=digest)
        if previous is not None:
            return previous, False
        admission.overlap_check(
            namespace=data["namespace"],
            selector=data["selector"],
            fault=data["fault"],
            service=service,
            max_duration_seconds=data["max_duration_seconds"],
            may_overlap=bool(data.get("may_overlap", False)),
            now=timezone.now(),
        )
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
            params=kind_params(data),
            duration_seconds=data["duration_seconds"],
            max_duration_seconds=data["max_duration_seconds"],
            max_pods=data.get("max_pods"),
            max_percent=data.get("max_percent"),
            stop_conditions=data.get("stop_conditions") or [],
            continue_without_metrics=bool(data.get("continue_without_metrics", False)),
            may_overlap=bool(data.get("may_overlap", False)),
            idempotency_key=key,
            body_sha256=digest if key else "",
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
    return exp, True


# The definition as the audit records it (with the team's slug and whether a key was sent).
_AUDITED_FIELDS = (
    "name namespace selector service fault delay_ms abort_http_status percent params "
    "duration_seconds max_duration_seconds max_pods max_percent stop_conditions "
    "continue_without_metrics may_overlap lease_duration renew_deadline retry_period"
).split()


def _experiment_data(exp: ChaosExperiment) -> dict[str, Any]:
    return {
        **{name: getattr(exp, name) for name in _AUDITED_FIELDS},
        "team": exp.team.slug,
        "idempotency_key": bool(exp.idempotency_key),
    }
