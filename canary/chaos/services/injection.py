"""Injection and revert: a fault is applied only under the lease term that holds it.

`fault_inject`, under a row lock on the lease, checks holder and term, writes the
injection row (one unreverted per experiment, a database constraint) and only then
applies the fault, so a crash at any point leaves a row the reaper can revert.
`fault_revert` deletes the fault's objects (idempotent), reads them back until the fault is
seen gone (a bounded number of attempts) and marks the row reverted, or, when the read-back
never confirms it, unconfirmed: the evidence is kept for a person, counted by
`kiln_chaos_reverts_unconfirmed_total` and shown among what needs attention, and
`fault_revert_recheck` (a person, or the reaper's next passes) tries and reads again.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from prometheus_client import Counter

from audit import record
from canary.chaos import actuators
from canary.chaos.models import (
    ChaosExperiment,
    ChaosInjection,
    ChaosLease,
    ExperimentStatus,
    InjectionState,
)
from canary.chaos.selectors import live_injection_of
from canary.chaos.services.backend import delivery_backend
from canary.chaos.services.leases import (
    CONTROLLER,
    ExperimentId,
    LeaseNotHeld,
    _require_control,
)
from canary.ownership import namespace_owner
from kiln.errors import Conflict, Forbidden, IllegalTransition
from kiln.identity.permissions import Actor, can_revert_fault

FAULTS_INJECTED = Counter("kiln_chaos_faults_injected_total", "Chaos faults injected", ["fault"])
FAULTS_REVERTED = Counter(
    "kiln_chaos_faults_reverted_total", "Chaos faults reverted", ["fault", "by"]
)
REVERTS_UNCONFIRMED = Counter(
    "kiln_chaos_reverts_unconfirmed_total",
    "Chaos reverts whose read-back still found the fault after every attempt",
    ["fault"],
)
log = logging.getLogger("kiln.chaos")


def fault_spec(*, experiment: ChaosExperiment) -> actuators.FaultSpec:
    """The actuator's view of an experiment."""
    exp = experiment
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
        params=dict(exp.params or {}),
    )


def _planned_refs(spec: actuators.FaultSpec, token: int) -> list[dict[str, Any]]:
    api_version, kind = actuators.object_kind_of(spec.fault)
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
    *,
    experiment_id: ExperimentId,
    holder: str,
    term: int,
    backend: Any = None,
    actor: Actor = CONTROLLER,
) -> ChaosInjection:
    """Apply the fault under the lease term `term`; idempotent for the same holder and term."""
    _require_control(actor)
    backend = delivery_backend(backend)
    # Who owns the namespace is read from the cluster before the lease's row lock is taken
    # (no I/O under a lock); an experiment's namespace and team never change.
    defined = ChaosExperiment.objects.select_related("team").get(pk=experiment_id)
    owner = namespace_owner(defined.namespace, backend)
    with transaction.atomic():
        lease = ChaosLease.objects.select_for_update().get(pk=experiment_id)
        exp = ChaosExperiment.objects.select_related("team").get(pk=experiment_id)
        if lease.holder != holder or lease.transitions != term or lease.renewed_at is None:
            # renewed_at is cleared when the cluster's Lease refused the term.
            raise LeaseNotHeld(f"{holder} does not hold term {term} of the lease")
        if exp.status != ExperimentStatus.RUNNING:
            raise IllegalTransition(f"the experiment is {exp.status}, not running")
        if owner != exp.team.slug:
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
        spec = fault_spec(experiment=exp)
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


def revert_attempts() -> tuple[int, float]:
    """(attempts, first pause in seconds) of a verified revert, from settings."""
    attempts = max(1, int(getattr(settings, "KILN_CHAOS_REVERT_ATTEMPTS", 3)))
    pause = max(0.0, float(getattr(settings, "KILN_CHAOS_REVERT_RETRY_SECONDS", 0.5)))
    return attempts, pause


# The first re-read after a revert the cluster still shows (doubling up to the attempt's pause):
# an object leaving once its finalizer clears is confirmed within this of going, not a pause later.
READ_BACK_FIRST_PAUSE = 0.05


def revert_verified(
    backend: Any, applied: list[dict[str, Any]], *, attempts: int, pause: float
) -> tuple[bool, int, list[dict[str, Any]]]:
    """Revert, read back, and again while the fault is seen: (confirmed, writes, evidence).

    `attempts` writes, the pause before each next one doubling from `pause`, as before; within
    that pause the fault is read back again promptly (from READ_BACK_FIRST_PAUSE, doubling), so
    it is confirmed as soon as the cluster lets it go. The window before a revert is marked
    unconfirmed is the same; only the reads are closer together. No database work here:
    callers hold no lock while it talks to the cluster.
    """
    evidence: list[dict[str, Any]] = []
    for attempt in range(1, attempts + 1):
        try:
            actuators.revert(backend, applied)
        except Exception as exc:  # noqa: BLE001 - a failed write is evidence; the read decides
            failed = [actuators.verify.revert_error(ref, exc) for ref in applied[:1]]
        else:
            failed = []
        evidence = failed + actuators.read_back(backend, applied)
        if not evidence:
            return True, attempt, []
        if attempt == attempts:
            break
        next_write = time.monotonic() + pause * 2 ** (attempt - 1)
        wait = min(READ_BACK_FIRST_PAUSE, pause)
        while (left := next_write - time.monotonic()) > 0:
            time.sleep(min(wait, left))
            wait *= 2
            if failed or time.monotonic() >= next_write:
                continue  # a failed write is written again; the next write reads back anyway
            evidence = actuators.read_back(backend, applied)
            if not evidence:
                return True, attempt, []
    return False, attempts, evidence


def _actor_name(actor: Actor) -> str:
    return actor if isinstance(actor, str) else getattr(actor, "username", str(actor))


def fault_revert(*, injection_id: int, actor: Actor, reason: str, backend: Any = None) -> bool:
    """Remove an injection's objects, read them back, and mark it reverted (or unconfirmed);
    idempotent (False if already reverted). The audit event says whether the read-back confirmed it."""
    injection = ChaosInjection.objects.select_related("experiment__team").get(pk=injection_id)
    if not can_revert_fault(actor, injection.experiment.team.slug):
        raise Forbidden(f"{actor} may not revert faults of team {injection.experiment.team.slug}")
    if injection.reverted_at is not None:
        return False
    attempts, pause = revert_attempts()
    confirmed, tries, evidence = revert_verified(
        delivery_backend(backend), injection.applied, attempts=attempts, pause=pause
    )
    by = _actor_name(actor)
    now = timezone.now()
    with transaction.atomic():
        marked = ChaosInjection.objects.filter(pk=injection_id, reverted_at__isnull=True).update(
            state=InjectionState.REVERTED if confirmed else InjectionState.UNCONFIRMED,
            reverted_at=now,
            reverted_by=by[:200],
            revert_reason=reason[:300],
            revert_confirmed=confirmed,
            revert_attempts=tries,
            revert_evidence=evidence,
            confirmed_at=now if confirmed else None,
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
                    "confirmed": confirmed,
                    "attempts": tries,
                    "evidence": evidence,
                },
            )
    if marked:
        FAULTS_REVERTED.labels(injection.experiment.fault, by.split(":")[0]).inc()
        if not confirmed:
            REVERTS_UNCONFIRMED.labels(injection.experiment.fault).inc()
            log.error(
                "chaos revert of injection %s unconfirmed after %s attempts: %s",
                injection.pk,
                tries,
                evidence,
            )
    return bool(marked)


def fault_revert_recheck(
    *,
    injection_id: int,
    actor: Actor,
    backend: Any = None,
    attempts: int | None = None,
    note: str = "",
) -> bool:
    """Revert an unconfirmed injection again and read it back (`attempts`, the configured number
    by default; the reaper tries once a pass); True once confirmed gone, audited `chaos.fault.revert_confirmed`. A person
    may also confirm here a fault removed by hand. Still there: the new evidence is kept, unaudited
    (nothing changed but what was read)."""
    injection = ChaosInjection.objects.select_related("experiment__team").get(pk=injection_id)
    if not can_revert_fault(actor, injection.experiment.team.slug):
        raise Forbidden(f"{actor} may not revert faults of team {injection.experiment.team.slug}")
    if injection.state != InjectionState.UNCONFIRMED:
        raise IllegalTransition(f"the injection is {injection.state}, not unconfirmed")
    configured, pause = revert_attempts()
    attempts = configured if attempts is None else max(1, attempts)
    confirmed, tries, evidence = revert_verified(
        delivery_backend(backend), injection.applied, attempts=attempts, pause=pause
    )
    with transaction.atomic():
        if not confirmed:
            ChaosInjection.objects.filter(pk=injection_id, state=InjectionState.UNCONFIRMED).update(
                revert_evidence=evidence
            )
            return False
        marked = ChaosInjection.objects.filter(
            pk=injection_id, state=InjectionState.UNCONFIRMED
        ).update(
            state=InjectionState.REVERTED,
            revert_confirmed=True,
            revert_evidence=[],
            confirmed_at=timezone.now(),
        )
        if marked:
            record(
                actor,
                "chaos.fault.revert_confirmed",
                injection.experiment,
                {
                    "injection": injection.pk,
                    "term": injection.fencing_token,
                    "attempts": tries,
                    "evidence_before": injection.revert_evidence,
                    "note": note,
                },
            )
    return bool(marked)
