"""Chaos actuators: the objects that carry a fault, applied and removed through the delivery backend.

- HTTP delay and abort: an Istio `networking.istio.io/v1` VirtualService with an
  `http[].fault` on the target service's host.
- Pod kill: a Chaos Mesh `chaos-mesh.org/v1alpha1` PodChaos whose own
  `spec.duration` is the experiment's hard maximum, a second bound that holds
  even if Kiln itself is gone.

Every object carries the experiment id and the lease's fencing token in its
name and labels, so a late write by a holder that lost its lease is a
different object, found and removed by the reaper's sweep. On the simulated
backend a pod kill also deletes the selected simulated pods, and the
VirtualService's fault is what simulated traffic sees.

`KubernetesLease` mirrors the database lease as a `coordination.k8s.io/v1`
Lease with optimistic concurrency on `metadata.resourceVersion`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

CHAOS_API_VS = "networking.istio.io/v1"
CHAOS_API_PODCHAOS = "chaos-mesh.org/v1alpha1"
LABEL_EXPERIMENT = "kiln.dev/chaos-experiment"
LABEL_TOKEN = "kiln.dev/chaos-token"  # noqa: S105 - a label key, not a secret
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


def virtual_service_fault(spec: FaultSpec, token: int) -> dict[str, Any]:
    """An Istio VirtualService injecting the HTTP delay or abort of `spec` on its service's host."""
    fault: dict[str, Any]
    percentage = {"value": effective_percent(spec)}
    if spec.fault == HTTP_DELAY:
        fault = {"delay": {"fixedDelay": f"{int(spec.delay_ms or 0)}ms", "percentage": percentage}}
    elif spec.fault == HTTP_ABORT:
        fault = {
            "abort": {"httpStatus": int(spec.abort_http_status or 503), "percentage": percentage}
        }
    else:
        raise ValueError(f"{spec.fault} is not an HTTP fault")
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


def _is_live(obj: dict | None) -> bool:
    return obj is not None and not (obj.get("metadata") or {}).get("deletionTimestamp")


def _ref(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "namespace": meta.get("namespace") or "",
        "name": meta["name"],
    }


def inject(backend: Any, spec: FaultSpec, token: int) -> Injected:
    """Apply the fault for one lease term and return what was applied; re-applying is a no-op."""
    from portal.delivery import AppliedRef

    if spec.fault == POD_KILL:
        pods = [
            p
            for p in backend.list("v1", "Pod", spec.namespace, selector_string(spec.selector))
            if _is_live(p)
        ]
        count = blast_radius(len(pods), spec.max_pods, spec.max_percent)
        manifest = pod_chaos(spec, token, max(count, 0))
        backend.apply([manifest], field_manager=FIELD_MANAGER)
        victims = [p["metadata"]["name"] for p in pods[:count]]
        if getattr(backend, "name", "") == "simulated":
            # The simulated cluster has no Chaos Mesh: do what its controller would.
            for name in victims:
                backend.delete(AppliedRef("v1", "Pod", spec.namespace, name))
        return Injected(applied=[_ref(manifest)], targets=victims)
    manifest = virtual_service_fault(spec, token)
    backend.apply([manifest], field_manager=FIELD_MANAGER)
    return Injected(applied=[_ref(manifest)], targets=[spec.service])


def revert(backend: Any, applied: list[dict[str, Any]]) -> int:
    """Delete every applied object; idempotent (missing objects count as reverted). Returns deletions made."""
    from portal.delivery import AppliedRef

    deleted = 0
    for ref in applied:
        if backend.delete(AppliedRef.from_dict(ref)):
            deleted += 1
    return deleted


def in_effect(backend: Any, applied: list[dict[str, Any]]) -> bool:
    """True if any applied object still exists and is not being deleted."""
    return any(
        _is_live(backend.get(r["apiVersion"], r["kind"], r.get("namespace") or "", r["name"]))
        for r in applied
    )


def stray_objects(
    backend: Any, experiment_id: str, namespace: str, live_tokens: set[int]
) -> list[dict]:
    """Objects of an experiment whose fencing token has no live injection (late writes of a lost holder)."""
    found: list[dict] = []
    selector = f"{LABEL_EXPERIMENT}={experiment_id}"
    for api_version, kind in ((CHAOS_API_VS, "VirtualService"), (CHAOS_API_PODCHAOS, "PodChaos")):
        for obj in backend.list(api_version, kind, namespace, selector):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            try:
                token = int(labels.get(LABEL_TOKEN, "-1"))
            except ValueError:
                token = -1
            if token not in live_tokens and _is_live(obj):
                found.append(_ref(obj))
    return found


@dataclass(frozen=True)
class FaultEffect:
    """What faults in the cluster do to one host's traffic: extra failed share and mean added latency."""

    error_rate: float = 0.0
    added_latency_ms: float = 0.0
    delayed_share: float = 0.0


def fault_effect(virtual_services: list[dict[str, Any]], host: str) -> FaultEffect:
    """Combine the HTTP faults of live VirtualServices routing `host` (what simulated traffic sees).

    Aborts compose as independent draws: the share of requests that survive is
    the product of (1 - p_i); delays add their mean (delay x share).
    """
    survive = 1.0
    latency = 0.0
    delayed = 0.0
    for vs in virtual_services:
        if not _is_live(vs) or host not in ((vs.get("spec") or {}).get("hosts") or []):
            continue
        for route in (vs.get("spec") or {}).get("http") or []:
            fault = route.get("fault") or {}
            abort = fault.get("abort")
            if abort and "httpStatus" in abort:
                share = float((abort.get("percentage") or {}).get("value", 100.0)) / 100.0
                survive *= 1.0 - max(0.0, min(1.0, share))
            delay = fault.get("delay")
            if delay and delay.get("fixedDelay"):
                share = float((delay.get("percentage") or {}).get("value", 100.0)) / 100.0
                latency += _duration_ms(delay["fixedDelay"]) * share
                delayed = max(delayed, share)
    return FaultEffect(
        error_rate=round(1.0 - survive, 6), added_latency_ms=latency, delayed_share=delayed
    )


def _duration_ms(text: str) -> float:
    """A Go-style duration of one unit ("250ms", "1.5s") in milliseconds."""
    for unit, factor in (
        ("ms", 1.0),
        ("us", 0.001),
        ("s", 1000.0),
        ("m", 60_000.0),
        ("h", 3_600_000.0),
    ):
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)]) * factor
            except ValueError:
                return 0.0
    return 0.0


def simulated_fault_effect(backend: Any, namespace: str, host: str) -> FaultEffect:
    """The fault effect on `host` in `namespace`, read from the VirtualServices in the backend."""
    return fault_effect(backend.list(CHAOS_API_VS, "VirtualService", namespace), host)


# --- coordination.k8s.io/v1 Lease ---------------------------------------------------------


def _micro_time(value: datetime) -> str:
    """Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseConflict(Exception):
    """The Kubernetes Lease changed under us (409) or is held by someone else."""


class KubernetesLease:
    """A `coordination.k8s.io/v1` Lease written with optimistic concurrency (resourceVersion)."""

    def __init__(self, api_client: Any, namespace: str, name: str) -> None:
        from kubernetes import client

        self.api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name

    def read(self) -> Any | None:
        """The live Lease or None."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def write(
        self,
        *,
        holder: str,
        lease_duration: float,
        acquire_time: datetime,
        renew_time: datetime,
        transitions: int,
        expected_holder: str | None,
    ) -> str:
        """Create or replace the Lease if it still names `expected_holder`; returns the new resourceVersion."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        spec = client.V1LeaseSpec(
            holder_identity=holder or None,
            lease_duration_seconds=max(1, math.ceil(lease_duration)),
            acquire_time=_micro_time(acquire_time),
            renew_time=_micro_time(renew_time),
            lease_transitions=transitions,
        )
        current = self.read()
        try:
            if current is None:
                body = client.V1Lease(
                    metadata=client.V1ObjectMeta(
                        name=self.name, namespace=self.namespace, labels={LABEL_MANAGED: "kiln"}
                    ),
                    spec=spec,
                )
                created = self.api.create_namespaced_lease(self.namespace, body)
                return created.metadata.resource_version
            current_holder = (current.spec.holder_identity if current.spec else None) or ""
            if expected_holder is not None and current_holder not in ("", expected_holder, holder):
                raise LeaseConflict(f"Lease {self.name} is held by {current_holder}")
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(
                    name=self.name,
                    namespace=self.namespace,
                    resource_version=current.metadata.resource_version,
                    labels=current.metadata.labels,
                ),
                spec=spec,
            )
            replaced = self.api.replace_namespaced_lease(self.name, self.namespace, body)
            return replaced.metadata.resource_version
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(f"Lease {self.name} changed concurrently") from exc
            raise

    def delete(self) -> None:
        """Remove the Lease (idempotent)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
