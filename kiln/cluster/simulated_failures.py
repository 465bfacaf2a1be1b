"""The simulated cluster's timing and injected failures: per-kind readiness delays, finalizer delays,
and the `SimulatedFailure` rows that make matching objects misbehave.
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import Q

from kiln.cluster.base import AppliedRef
from kiln.cluster.models import SimulatedFailure

# Seconds until an object reports Ready, per kind, in the "realistic" profile.
REALISTIC_READY_SECONDS: dict[str, float] = {
    "Namespace": 0.5,
    "ResourceQuota": 0.2,
    "LimitRange": 0.2,
    "NetworkPolicy": 0.3,
    "RoleBinding": 0.2,
    "TenantControlPlane": 20.0,
    "NodePool": 12.0,
    "Application": 5.0,
    "VirtualService": 1.0,
    "DestinationRule": 1.0,
    "PodChaos": 2.0,
}
REALISTIC_DEFAULT_SECONDS = 8.0  # Crossplane claims and anything else
PROFILE_FACTOR = {"zero": 0.0, "fast": 0.05, "realistic": 1.0}
STUCK_FINALIZER = "kiln.dev/simulated-stuck"


def ready_delay(kind: str) -> float:
    """Seconds until an object of `kind` is ready under the configured profile and scale."""
    profile = getattr(settings, "KILN_SIM_DELAY_PROFILE", "fast")
    factor = PROFILE_FACTOR.get(profile, 1.0) * float(
        getattr(settings, "KILN_SIM_DELAY_SCALE", 1.0)
    )
    return REALISTIC_READY_SECONDS.get(kind, REALISTIC_DEFAULT_SECONDS) * factor


def finalizer_delay() -> float:
    """Seconds until a deleted object's finalizers clear (unless one is stuck)."""
    if getattr(settings, "KILN_SIM_DELAY_PROFILE", "fast") == "zero":
        return 0.0
    return float(getattr(settings, "KILN_SIM_FINALIZER_SECONDS", 1.0))


def inject_failure(
    mode: str,
    *,
    kind: str = "",
    name: str = "",
    namespace: str = "",
    api_version: str = "",
    times: int | None = None,
) -> SimulatedFailure:
    """Make matching objects fail in `mode` (never_ready, stuck_finalizer, apply_error, degraded)."""
    if mode not in dict(SimulatedFailure.MODES):
        raise ValueError(f"unknown failure mode {mode!r}")
    return SimulatedFailure.objects.create(
        mode=mode,
        kind=kind,
        name=name,
        namespace=namespace,
        api_version=api_version,
        remaining=times,
    )


def clear_failures() -> None:
    """Remove every injected failure."""
    SimulatedFailure.objects.all().delete()


def active_failures() -> list[SimulatedFailure]:
    """Failures that still fire (unlimited, or with some times left)."""
    return list(SimulatedFailure.objects.filter(Q(remaining__isnull=True) | Q(remaining__gt=0)))


def failures_for(ref: AppliedRef, active: list[SimulatedFailure]) -> list[SimulatedFailure]:
    """The failures among `active` whose fields match `ref` ("" matches anything)."""
    fields = ("api_version", "kind", "namespace", "name")
    return [f for f in active if all(getattr(f, k) in ("", getattr(ref, k)) for k in fields)]


def consume(failure: SimulatedFailure) -> None:
    """Count one firing of a limited failure."""
    if failure.remaining is not None:
        SimulatedFailure.objects.filter(pk=failure.pk, remaining__gt=0).update(
            remaining=failure.remaining - 1
        )
