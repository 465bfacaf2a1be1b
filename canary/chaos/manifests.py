"""Chaos manifests: the objects that carry a fault, built from a `FaultSpec` (pure: no Django, no backend).

- HTTP delay and abort: a standalone Istio `networking.istio.io/v1` VirtualService
  with an `http[].fault` on the host, used only when no live VirtualService already
  routes it (then the fault is merged into that one: `faults.py`).
- Pod kill: a Chaos Mesh `chaos-mesh.org/v1alpha1` PodChaos whose own
  `spec.duration` is the experiment's hard maximum, a second bound that holds
  even if Kiln itself is gone.

Every object carries the experiment id and the lease's fencing token in its name
and labels, so a late write by a holder that lost its lease is a different
object, found and removed by the reaper's sweep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from canary.faults import LABEL_EXPERIMENT, LABEL_TOKEN
from canary.traffic import EXPORT_TO

CHAOS_API_VS = "networking.istio.io/v1"

CHAOS_API_PODCHAOS = "chaos-mesh.org/v1alpha1"

LABEL_MANAGED = "app.kubernetes.io/managed-by"

FIELD_MANAGER = "kiln-chaos"

POD_KILL = "pod-kill"

HTTP_DELAY = "http-delay"

HTTP_ABORT = "http-abort"


@dataclass(frozen=True)
class FaultSpec:
    """Everything an actuator needs to build a fault; no Django."""

    experiment_id: str
    namespace: str
    selector: dict[str, str]
    fault: str
    service: str = ""
    delay_ms: int | None = None
    abort_http_status: int | None = None
    percent: float = 100.0
    max_duration_seconds: int = 60
    max_pods: int | None = None
    max_percent: float | None = None
    params: dict[str, Any] = field(default_factory=dict)  # Chaos Mesh kinds' magnitude (kinds.py)


@dataclass
class Injected:
    """What one injection applied: object refs (as dicts) and the pods or hosts it touched."""

    applied: list[dict[str, Any]] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)


def object_name(spec: FaultSpec, token: int) -> str:
    """`chaos-<first 8 hex of the experiment id>-<fencing token>`: a DNS-1123 name unique per lease term."""
    return f"chaos-{spec.experiment_id.replace('-', '')[:8]}-{token}"


def labels_for(spec: FaultSpec, token: int) -> dict[str, str]:
    """Labels that let the reaper find every object of an experiment."""
    return {
        LABEL_EXPERIMENT: spec.experiment_id,
        LABEL_TOKEN: str(token),
        LABEL_MANAGED: "kiln",
    }


def blast_radius(total: int, max_pods: int | None, max_percent: float | None) -> int:
    """Pods a fault may touch: min(max_pods, floor(total * max_percent / 100)), never more than total."""
    limit = total
    if max_pods is not None:
        limit = min(limit, max_pods)
    if max_percent is not None:
        limit = min(limit, math.floor(total * max_percent / 100.0 + 1e-9))
    return max(0, limit)


def effective_percent(spec: FaultSpec) -> float:
    """Share of requests an HTTP fault affects: the asked percent capped by the blast-radius percent."""
    percent = spec.percent
    if spec.max_percent is not None:
        percent = min(percent, spec.max_percent)
    return max(0.0, min(100.0, percent))


def fault_body(spec: FaultSpec) -> dict[str, Any]:
    """`{"delay": ...}` or `{"abort": ...}`: the HTTPFaultInjection of `spec`."""
    percentage = {"value": effective_percent(spec)}
    if spec.fault == HTTP_DELAY:
        return {"delay": {"fixedDelay": f"{int(spec.delay_ms or 0)}ms", "percentage": percentage}}
    if spec.fault == HTTP_ABORT:
        return {
            "abort": {"httpStatus": int(spec.abort_http_status or 503), "percentage": percentage}
        }
    raise ValueError(f"{spec.fault} is not an HTTP fault")


def virtual_service_fault(spec: FaultSpec, token: int) -> dict[str, Any]:
    """An Istio VirtualService injecting the HTTP delay or abort of `spec` on its service's host."""
    fault = fault_body(spec)  # raises ValueError for a fault that is not HTTP
    return {
        "apiVersion": CHAOS_API_VS,
        "kind": "VirtualService",
        "metadata": {
            "name": object_name(spec, token),
            "namespace": spec.namespace,
            "labels": labels_for(spec, token),
            "annotations": {"kiln.dev/chaos-max-duration": f"{spec.max_duration_seconds}s"},
        },
        "spec": {
            "hosts": [spec.service],
            "exportTo": list(EXPORT_TO),
            "http": [
                {
                    "name": "kiln-chaos",
                    "fault": fault,
                    "route": [{"destination": {"host": spec.service}}],
                }
            ],
        },
    }


def pod_chaos(spec: FaultSpec, token: int, count: int) -> dict[str, Any]:
    """A Chaos Mesh PodChaos killing `count` selected pods, its own duration set to the hard maximum."""
    return {
        "apiVersion": CHAOS_API_PODCHAOS,
        "kind": "PodChaos",
        "metadata": {
            "name": object_name(spec, token),
            "namespace": spec.namespace,
            "labels": labels_for(spec, token),
        },
        "spec": {
            "action": "pod-kill",
            "mode": "fixed",
            "value": str(count),
            "duration": f"{spec.max_duration_seconds}s",
            "selector": {
                "namespaces": [spec.namespace],
                "labelSelectors": dict(spec.selector),
            },
        },
    }


def selector_string(selector: dict[str, str]) -> str:
    """matchLabels as an equality-based label selector string."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
