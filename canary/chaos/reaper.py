"""The chaos reaper: revert every fault whose holder must have reverted, end overdue experiments.

Runs as the beat task `chaos.tasks.chaos_reap` and as the process
`manage.py chaos_reaper`; idempotent, so any number of reapers may run.

Metrics: `kiln_chaos_reaper_reverts_total{reason}` (faults the reaper reverted),
`kiln_chaos_reaper_strays_removed_total` (fault objects no live injection accounts for) and,
read when the reaper process is scraped, `kiln_chaos_faults_past_lease`: live faults the reaper
would revert now. A pass reverts them, so one that stays above zero is a fault outliving its lease.
`kiln_chaos_faults_unconfirmed` counts reverts whose read-back still found the fault; each pass
reverts and reads those once more and confirms the ones now gone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError
from django.utils import timezone
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from canary.chaos import actuators
from canary.chaos.leases import reap_due
from canary.chaos.models import (
    ChaosExperiment,
    ChaosInjection,
    ChaosLease,
    ExperimentStatus,
    InjectionState,
)
from canary.chaos.selectors import lease_state, live_injections, timings_of
from canary.chaos.services import delivery_backend, experiment_end, fault_revert
from canary.chaos.services.injection import fault_revert_recheck
from kiln.cluster import AppliedRef
from kiln.identity.permissions import system_actor
from scheduler.freezes import disruption_freezes_reap

REVERTS = Counter("kiln_chaos_reaper_reverts_total", "Faults reverted by the reaper", ["reason"])
STRAYS = Counter(
    "kiln_chaos_reaper_strays_removed_total",
    "Fault objects deleted by the reaper because no live injection accounts for them",
)


@dataclass
class ReapResult:
    """What one reaper pass did."""

    reverted: list[int] = field(default_factory=list)
    strays: list[dict[str, Any]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    confirmed: list[int] = field(default_factory=list)  # unconfirmed reverts now seen gone

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _reap_reason(injection: ChaosInjection, now: datetime) -> str | None:
    exp = injection.experiment
    lease = ChaosLease.objects.filter(pk=exp.pk).first()
    if exp.is_terminal:
        return f"experiment {exp.status}"
    if exp.started_at and now >= exp.started_at + timedelta(seconds=exp.max_duration_seconds):
        return "hard maximum duration reached"
    if (
        lease is None
        or lease.holder != injection.holder
        or lease.transitions != injection.fencing_token
    ):
        return "lease term ended"
    if reap_due(lease.renewed_at, now, timings_of(exp)):
        return "lease lapsed"
    return None


def chaos_reap(
    *, backend: Any = None, dry_run: bool = False, now: datetime | None = None
) -> ReapResult:
    """Revert every fault whose lease lapsed or whose experiment ended; end overdue experiments. Idempotent."""
    backend = delivery_backend(backend)
    now = now or timezone.now()
    actor = system_actor("chaos-reaper")
    result = ReapResult()
    for injection in list(live_injections()):
        reason = _reap_reason(injection, now)
        if reason is None:
            continue
        if dry_run:
            result.reverted.append(injection.pk)
        elif fault_revert(injection_id=injection.pk, actor=actor, reason=reason, backend=backend):
            result.reverted.append(injection.pk)
            REVERTS.labels(_reason_label(reason)).inc()
    # Experiments nobody finishes: past the hard maximum, or past their duration with the lease lapsed.
    for exp in ChaosExperiment.objects.filter(
        status=ExperimentStatus.RUNNING, started_at__isnull=False
    ):
        to, reason = None, ""
        if now >= exp.started_at + timedelta(seconds=exp.max_duration_seconds):
            to, reason = ExperimentStatus.EXPIRED, "hard maximum duration reached"
        elif (
            now >= exp.started_at + timedelta(seconds=exp.duration_seconds)
            and not lease_state(exp, now=now).held
        ):
            to, reason = (
                ExperimentStatus.COMPLETED,
                "duration elapsed with no controller holding the lease",
            )
        if to is not None:
            if not dry_run:
                experiment_end(
                    experiment_id=exp.pk, to=to, actor=actor, reason=reason, backend=backend
                )
            result.ended.append(str(exp.pk))
    if not dry_run:
        # The nodes an experiment froze thaw with its lease (scheduler.freezes).
        disruption_freezes_reap(actor=actor, backend=backend, now=now)
    result.strays = _sweep_strays(backend, dry_run=dry_run)
    if not dry_run and result.strays:
        STRAYS.inc(len(result.strays))
    if not dry_run:
        result.confirmed = _recheck_unconfirmed(backend, actor)
    return result


def _recheck_unconfirmed(backend: Any, actor: Any) -> list[int]:
    """Revert and read back once more every injection whose revert was never confirmed; the ones
    now seen gone are confirmed (and leave the attention list). The others stay a person's."""
    confirmed: list[int] = []
    for pk in ChaosInjection.objects.filter(state=InjectionState.UNCONFIRMED).values_list(
        "pk", flat=True
    ):
        if fault_revert_recheck(injection_id=pk, actor=actor, backend=backend, attempts=1):
            confirmed.append(pk)
    return confirmed


def _reason_label(reason: str) -> str:
    """A reason as a label value of few values: "experiment completed" -> "experiment_ended"."""
    return "experiment_ended" if reason.startswith("experiment ") else reason.replace(" ", "_")


def faults_past_lease(now: datetime | None = None) -> int:
    """Live faults the reaper would revert now (lease lapsed or ended, experiment over, overdue)."""
    now = now or timezone.now()
    return sum(1 for injection in live_injections() if _reap_reason(injection, now) is not None)


class _CountGauge(Collector):
    """One gauge counted from the database when scraped; nothing while the database is away."""

    name: str
    documentation: str

    def count(self) -> int:
        raise NotImplementedError

    def collect(self):
        try:
            value = self.count()
        except DatabaseError:
            return
        family = GaugeMetricFamily(self.name, self.documentation)
        family.add_metric([], float(value))
        yield family

    def describe(self) -> list:
        """Nothing: registering must not read the database."""
        return []


class FaultsPastLeaseCollector(_CountGauge):
    """`kiln_chaos_faults_past_lease`, read when scraped."""

    name = "kiln_chaos_faults_past_lease"
    documentation = "Live chaos faults whose lease lapsed or ended and that are not reverted yet"

    def count(self) -> int:
        return faults_past_lease()


class FaultsUnconfirmedCollector(_CountGauge):
    """`kiln_chaos_faults_unconfirmed`: reverts whose read-back never confirmed the fault gone,
    waiting for a person (or for the reaper's re-read to confirm them), read when scraped."""

    name = "kiln_chaos_faults_unconfirmed"
    documentation = "Chaos faults reverted but still seen in the cluster when read back"

    def count(self) -> int:
        return ChaosInjection.objects.filter(state=InjectionState.UNCONFIRMED).count()


def _sweep_strays(backend: Any, *, dry_run: bool) -> list[dict[str, Any]]:
    """Delete fault objects no live injection accounts for (a lost holder's late write)."""
    objects: list[dict] = []
    for api_version, kind in actuators.FAULT_OBJECT_KINDS:
        objects.extend(
            backend.list(
                api_version,
                kind,
                None,
                f"{actuators.LABEL_MANAGED}=kiln,{actuators.LABEL_EXPERIMENT}",
            )
        )
    merged = [
        vs
        for vs in backend.list(
            actuators.CHAOS_API_VS, "VirtualService", None, actuators.LABEL_MERGED
        )
        if actuators.fault_entries(vs)
    ]
    if not objects and not merged:
        return []
    # Read the live set after listing: an object listed had its row written before it was applied.
    live = {
        (str(e), t)
        for e, t in ChaosInjection.objects.filter(reverted_at__isnull=True).values_list(
            "experiment_id", "fencing_token"
        )
    }
    strays = actuators.sweep_merged(backend, live, merged, dry_run=dry_run) if merged else []
    for obj in objects:
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        labels = meta.get("labels") or {}
        key = (labels.get(actuators.LABEL_EXPERIMENT, ""), _int(labels.get(actuators.LABEL_TOKEN)))
        if key in live:
            continue
        ref = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "namespace": meta.get("namespace") or "",
            "name": meta["name"],
        }
        strays.append(ref)
        if not dry_run:
            backend.delete(AppliedRef.from_dict(ref))
    return strays


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1
