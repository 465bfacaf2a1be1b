"""Chaos reads: experiments a viewer may see, lease state, injection timelines, stop-condition signals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone

from audit.models import OutboxEvent
from canary.chaos.actuators import simulated_fault_effect
from canary.chaos.leases import LeaseTimings, expires_at
from canary.chaos.models import ChaosExperiment, ChaosInjection, ChaosLease
from canary.hosts import HostRefused, canonical_service_host
from kiln.cluster.backends import get_backend
from kiln.errors import NotFound
from kiln.identity import visibility
from kiln.identity.permissions import Actor


def experiment_list(*, viewer: Actor, status: str | None = None) -> QuerySet[ChaosExperiment]:
    """Experiments the viewer may see (kiln.identity.visibility.EXPERIMENTS)."""
    qs = visibility.restrict(
        ChaosExperiment.objects.select_related("team", "lease"),
        viewer,
        visibility.EXPERIMENTS,
        team_field="team__slug",
    )
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-created_at")


def experiment_get(*, viewer: Actor, experiment_id: Any) -> ChaosExperiment:
    """One experiment, or NotFound when it is missing or invisible to the viewer (same answer)."""
    rows = visibility.restrict(
        ChaosExperiment.objects.select_related("team"),
        viewer,
        visibility.EXPERIMENTS,
        team_field="team__slug",
    )
    try:
        return rows.get(pk=experiment_id)
    except (ChaosExperiment.DoesNotExist, ValueError, TypeError, ValidationError) as exc:
        raise NotFound("No such experiment.") from exc


def timings_of(exp: ChaosExperiment) -> LeaseTimings:
    """The lease timings fixed on the experiment at creation."""
    return LeaseTimings(
        lease_duration=exp.lease_duration,
        renew_deadline=exp.renew_deadline,
        retry_period=exp.retry_period,
        max_clock_skew=exp.max_clock_skew,
        revert_budget=exp.revert_budget,
    )


@dataclass(frozen=True)
class LeaseState:
    """What a dashboard shows about a lease."""

    holder: str
    resource_version: int
    term: int
    renewals: int
    acquired_at: datetime | None
    renewed_at: datetime | None
    expires_at: datetime | None
    held: bool
    seconds_left: float | None


def lease_state(exp: ChaosExperiment, *, now: datetime | None = None) -> LeaseState:
    """The live lease state of an experiment: holder, renewals, expiry."""
    now = now or timezone.now()
    try:
        lease = exp.lease  # loaded with the experiment by experiment_list, else one query
    except ChaosLease.DoesNotExist:
        lease = None
    if lease is None or not lease.holder or lease.renewed_at is None:
        return LeaseState(
            holder="",
            resource_version=lease.resource_version if lease else 0,
            term=lease.transitions if lease else 0,
            renewals=lease.renewals if lease else 0,
            acquired_at=lease.acquired_at if lease else None,
            renewed_at=lease.renewed_at if lease else None,
            expires_at=None,
            held=False,
            seconds_left=None,
        )
    expiry = expires_at(lease.renewed_at, timings_of(exp))
    left = (expiry - now).total_seconds()
    return LeaseState(
        holder=lease.holder,
        resource_version=lease.resource_version,
        term=lease.transitions,
        renewals=lease.renewals,
        acquired_at=lease.acquired_at,
        renewed_at=lease.renewed_at,
        expires_at=expiry,
        held=left > 0,
        seconds_left=max(0.0, left),
    )


def injection_list(exp: ChaosExperiment) -> QuerySet[ChaosInjection]:
    """Every injection of an experiment, oldest first."""
    return ChaosInjection.objects.filter(experiment=exp).order_by("created_at", "id")


def live_injections() -> QuerySet[ChaosInjection]:
    """Injections not yet reverted, with their experiment and lease."""
    return ChaosInjection.objects.filter(reverted_at__isnull=True).select_related(
        "experiment", "experiment__lease"
    )


def live_injection_of(exp_id: Any) -> ChaosInjection | None:
    """The one unreverted injection of an experiment, if any."""
    return ChaosInjection.objects.filter(experiment_id=exp_id, reverted_at__isnull=True).first()


# --- stop-condition signals ---------------------------------------------------------------
#
# A stop condition names a signal; a provider reads it for an experiment's target.
# Providers are registered by the part of Kiln that knows the signal (canary
# rollouts, the simulated cluster, Prometheus), so this module stays ignorant of
# where numbers come from. A provider returns None when it has no reading.

SignalProvider = Callable[[ChaosExperiment], Any]
_providers: dict[str, list[SignalProvider]] = {}


def register_signal(kind: str, provider: SignalProvider) -> None:
    """Register a provider for a stop-condition signal (`error-rate`, `canary-rolled-back`)."""
    _providers.setdefault(kind, [])
    if provider not in _providers[kind]:
        _providers[kind].append(provider)


def unregister_signal(kind: str, provider: SignalProvider) -> None:
    """Remove a provider registered with `register_signal`."""
    if provider in _providers.get(kind, []):
        _providers[kind].remove(provider)


def read_signal(kind: str, exp: ChaosExperiment) -> Any:
    """The first non-None reading of a signal for the experiment's target, or None."""
    for provider in list(_providers.get(kind, [])):
        value = provider(exp)
        if value is not None:
            return value
    return None


def stop_condition_tripped(exp: ChaosExperiment) -> str | None:
    """The reason the first tripped stop condition gives, or None while all hold."""
    for cond in exp.stop_conditions or []:
        kind = cond.get("kind")
        if kind == "error-rate-above":
            rate = read_signal("error-rate", exp)
            if rate is not None and float(rate) > float(cond["threshold"]):
                return f"target error rate {float(rate):.4f} above {float(cond['threshold']):.4f}"
        elif kind == "latency-p99-above-ms":
            p99 = read_signal("latency-p99-ms", exp)
            if p99 is not None and float(p99) > float(cond["threshold"]):
                return (
                    f"target p99 latency {float(p99):.1f}ms above {float(cond['threshold']):.1f}ms"
                )
        elif kind == "canary-rolled-back":
            if read_signal("canary-rolled-back", exp):
                return "a canary on the target rolled back"
    return None


def _rollback_from_audit(exp: ChaosExperiment) -> bool | None:
    """A canary rollback on the target namespace recorded in the audit outbox since the experiment started."""
    if exp.started_at is None:
        return None
    events = OutboxEvent.objects.filter(
        action__startswith="canary.rollout.rolled", recorded_at__gte=exp.started_at
    ).only("data")
    for event in events:
        data = event.data or {}
        if data.get("namespace") == exp.namespace and (
            not exp.service or _same_host(data.get("service"), exp)
        ):
            return True
    return None


def _same_host(service: Any, exp: ChaosExperiment) -> bool:
    """True if an event's service names the experiment's target (any accepted host form), or none."""
    if service in (None, ""):
        return True
    try:
        return canonical_service_host(service, exp.namespace) == exp.service
    except HostRefused:
        return service == exp.service


register_signal("canary-rolled-back", _rollback_from_audit)


def _simulated_error_rate(exp: ChaosExperiment) -> float | None:
    """Where traffic is simulated: the share of the target's requests the faults in the cluster fail."""
    backend = get_backend()
    if not backend.simulates_traffic or not exp.service:
        return None
    return simulated_fault_effect(backend, exp.namespace, exp.service).error_rate


def _simulated_latency_p99(exp: ChaosExperiment) -> float | None:
    """Where traffic is simulated: added latency at p99 (a delayed share of 1% or more shows in p99)."""
    backend = get_backend()
    if not backend.simulates_traffic or not exp.service:
        return None
    effect = simulated_fault_effect(backend, exp.namespace, exp.service)
    if effect.delayed_share >= 0.01 and effect.delayed_share > 0:
        return effect.added_latency_ms / effect.delayed_share
    return 0.0


register_signal("error-rate", _simulated_error_rate)
register_signal("latency-p99-ms", _simulated_latency_p99)
