"""Chaos actuators: the objects that carry a fault, applied and removed through the delivery backend.

- HTTP delay and abort: when a live VirtualService already routes the target
  host (a rollout's, or another namespace-local one), the fault goes into its http routes
  (`HTTPRoute.fault`), owned through the `kiln.dev/chaos-faults` annotation by
  experiment id and fencing token, because a mesh does not merge two
  VirtualServices of one host. Only when none does, a standalone Istio
  `networking.istio.io/v1` VirtualService with an `http[].fault` on the host.
- Pod kill: a Chaos Mesh `chaos-mesh.org/v1alpha1` PodChaos whose own
  `spec.duration` is the experiment's hard maximum, a second bound that holds
  even if Kiln itself is gone.

Every standalone object carries the experiment id and the lease's fencing
token in its name and labels, and every merged fault is listed with both in
the annotation, so a late write by a holder that lost its lease is a
different object or entry, found and removed by the reaper's sweep. A pod kill
asks the backend to carry it out (`carry_out_pod_kill`: Chaos Mesh does it in a
real cluster, the simulated cluster deletes the pods), and the VirtualService's
fault is what simulated traffic sees.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from canary.traffic import EXPORT_TO, MANAGED_BY
from kiln.cluster import AppliedRef, Conflict

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
        backend.carry_out_pod_kill(namespace=spec.namespace, pods=victims)
        return Injected(applied=[_ref(manifest)], targets=victims)
    owner = {"experiment": spec.experiment_id, "token": int(token)}
    targets = merge_targets(backend, spec.namespace, spec.service)
    for vs in targets:
        if not may_carry_faults(vs):
            raise FaultConflict(
                f"VirtualService {vs['metadata']['name']} routes {spec.service} and is exported "
                "beyond its namespace: Kiln writes faults only into namespace-local VirtualServices"
            )
    merged = [
        {**_ref(vs), "merged": True, **owner}
        for vs in targets
        if merge_fault(backend, spec, token, vs["metadata"]["name"])
    ]
    if merged:
        return Injected(applied=merged, targets=[spec.service])
    manifest = virtual_service_fault(spec, token)
    backend.apply([manifest], field_manager=FIELD_MANAGER)
    return Injected(applied=[{**_ref(manifest), **owner}], targets=[spec.service])


def revert(backend: Any, applied: list[dict[str, Any]]) -> int:
    """Remove every applied fault; idempotent (missing objects count as reverted). Returns removals made.

    A standalone object is deleted. A ref that names its owner (experiment, token)
    also takes that owner's merged faults out of every VirtualService of its
    namespace, and only those: faults of other terms or experiments stay.
    """
    removed = 0
    for ref in applied:
        owner = _owner_of(ref)
        if owner is not None and ref.get("kind") == "VirtualService":
            namespace = ref.get("namespace") or ""
            for vs in backend.list(CHAOS_API_VS, "VirtualService", namespace):
                if (
                    _is_live(vs)
                    and _owns(vs, owner)
                    and unmerge_fault(backend, namespace, vs["metadata"]["name"], *owner)
                ):
                    removed += 1
        if not ref.get("merged") and backend.delete(AppliedRef.from_dict(ref)):
            removed += 1
    return removed


def _owner_of(ref: dict[str, Any]) -> tuple[str, int] | None:
    if "experiment" not in ref or "token" not in ref:
        return None
    return (str(ref["experiment"]), _as_int(ref["token"]))


def _owns(vs: dict[str, Any], owner: tuple[str, int]) -> bool:
    return any(
        (str(e.get("experiment")), _as_int(e.get("token"))) == owner for e in fault_entries(vs)
    )


def in_effect(backend: Any, applied: list[dict[str, Any]]) -> bool:
    """True if any applied object still exists (merged: still carries its owner's fault) and is not being deleted."""
    for r in applied:
        live = backend.get(r["apiVersion"], r["kind"], r.get("namespace") or "", r["name"])
        if not _is_live(live):
            continue
        owner = _owner_of(r)
        if not r.get("merged") or (owner is not None and _owns(live, owner)):
            return True
    # A standalone fault a rollout's VirtualService adopted lives on in that VirtualService.
    for r in applied:
        owner = _owner_of(r)
        if owner is None or r.get("kind") != "VirtualService" or r.get("merged"):
            continue
        for vs in backend.list(CHAOS_API_VS, "VirtualService", r.get("namespace") or ""):
            if _is_live(vs) and _owns(vs, owner):
                return True
    return False


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


def fault_effect(
    virtual_services: list[dict[str, Any]], host: str, namespace: str | None = None
) -> FaultEffect:
    """Combine the HTTP faults of live VirtualServices routing `host` (what simulated traffic sees).

    Both shapes count: a standalone fault VirtualService and a fault merged into
    another VirtualService's routes (counted once per owner and kind, however
    many routes or VirtualServices carry it). Aborts compose as independent
    draws: the share of requests that survive is the product of (1 - p_i);
    delays add their mean (delay x share).
    """
    survive = 1.0
    latency = 0.0
    delayed = 0.0
    seen: set[tuple[str, int, str]] = set()
    for vs in virtual_services:
        if not _is_live(vs) or not routes_host(vs, host, namespace):
            continue
        owners = {
            (e.get("route"), e.get("key")): (str(e.get("experiment")), _as_int(e.get("token")))
            for e in fault_entries(vs)
        }
        for index, route in enumerate((vs.get("spec") or {}).get("http") or []):
            fault = dict(route.get("fault") or {})
            for key in list(fault):
                owner = owners.get((_route_key(route, index), key))
                if owner is not None:
                    if (*owner, key) in seen:
                        fault.pop(key)
                    seen.add((*owner, key))
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
    return fault_effect(backend.list(CHAOS_API_VS, "VirtualService", namespace), host, namespace)


# --- faults merged into a VirtualService that already routes the host -----------------------
#
# On a mesh, two VirtualServices for one host are not merged for sidecar traffic (one wins), so
# when a live VirtualService already routes the fault's host the fault goes INTO its http routes
# (`HTTPRoute.fault`). The annotation `kiln.dev/chaos-faults` lists who owns each merged fault
# key (route, delay|abort) by experiment id and fencing token: a revert removes only the keys its
# own term owns, so an old term never removes a newer term's fault, and the reaper strips keys
# no live injection accounts for. Writes are read-modify-write with the object's resourceVersion
# as a precondition (retried on a Conflict), inside the backend's `lock_namespace` (the simulated
# cluster serialises the namespace's writers there, so they rarely conflict at all).

ANNOTATION_FAULTS = "kiln.dev/chaos-faults"
LABEL_MERGED = "kiln.dev/chaos-merged"  # set while ANNOTATION_FAULTS lists any fault
MERGE_FIELD_MANAGER = "kiln"  # the rollout's field manager: both writers own the same fields
MERGE_ATTEMPTS = 5


class FaultConflict(Exception):
    """Another experiment already injects the same fault kind into the same route."""


def canonical_host(host: str, namespace: str) -> str:
    """A host as Istio resolves it within `namespace`: short names become `<name>.<ns>.svc.cluster.local`."""
    host = host.strip().lower().rstrip(".")
    if "*" in host:
        return host
    if "." not in host:
        return f"{host}.{namespace}.svc.cluster.local"
    if host.endswith(".svc"):
        return f"{host}.cluster.local"
    if host.count(".") == 1:
        return f"{host}.svc.cluster.local"
    return host


def routes_host(vs: dict[str, Any], host: str, namespace: str | None = None) -> bool:
    """True if the VirtualService lists `host` (resolved in its own namespace) among its hosts."""
    vs_ns = (vs.get("metadata") or {}).get("namespace") or ""
    wanted = canonical_host(host, namespace or vs_ns)
    return any(
        canonical_host(h, vs_ns) == wanted for h in (vs.get("spec") or {}).get("hosts") or []
    )


def is_standalone_fault(vs: dict[str, Any]) -> bool:
    """True for a VirtualService that Kiln created only to carry one fault."""
    return LABEL_EXPERIMENT in ((vs.get("metadata") or {}).get("labels") or {})


def is_namespace_local(vs: dict[str, Any]) -> bool:
    """True if the VirtualService is exported to its own namespace only (`exportTo: ["."]`)."""
    namespace = (vs.get("metadata") or {}).get("namespace") or ""
    export = (vs.get("spec") or {}).get("exportTo")
    return isinstance(export, list) and bool(export) and all(e in (".", namespace) for e in export)


def may_carry_faults(vs: dict[str, Any]) -> bool:
    """A VirtualService a fault may be merged into: namespace-local, or a rollout's own (made so on write)."""
    labels = (vs.get("metadata") or {}).get("labels") or {}
    return is_namespace_local(vs) or all(labels.get(k) == v for k, v in MANAGED_BY.items())


def merge_targets(backend: Any, namespace: str, host: str) -> list[dict[str, Any]]:
    """Live VirtualServices (not Kiln's own fault objects) whose http routes serve `host`."""
    return [
        vs
        for vs in backend.list(CHAOS_API_VS, "VirtualService", namespace)
        if _is_live(vs)
        and not is_standalone_fault(vs)
        and (vs.get("spec") or {}).get("http")
        and routes_host(vs, host, namespace)
    ]


def fault_entries(vs: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The merged-fault ownership entries of a VirtualService: route, key, experiment, token."""
    raw = (((vs or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_FAULTS)
    if not raw:
        return []
    try:
        entries = json.loads(raw)
    except ValueError:
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _route_key(route: dict[str, Any], index: int) -> str:
    return route.get("name") or f"#{index}"


def _fault_body(spec: FaultSpec) -> dict[str, Any]:
    """`{"delay": ...}` or `{"abort": ...}`: the HTTPFaultInjection of `spec`."""
    percentage = {"value": effective_percent(spec)}
    if spec.fault == HTTP_DELAY:
        return {"delay": {"fixedDelay": f"{int(spec.delay_ms or 0)}ms", "percentage": percentage}}
    if spec.fault == HTTP_ABORT:
        return {
            "abort": {"httpStatus": int(spec.abort_http_status or 503), "percentage": percentage}
        }
    raise ValueError(f"{spec.fault} is not an HTTP fault")


def _writable(vs: dict[str, Any]) -> dict[str, Any]:
    """The applyable part of a live object: identity, labels, annotations, spec and resourceVersion."""
    meta = vs.get("metadata") or {}
    out_meta: dict[str, Any] = {"name": meta["name"], "namespace": meta.get("namespace") or ""}
    for key in ("labels", "annotations", "finalizers"):
        if meta.get(key):
            out_meta[key] = copy.deepcopy(meta[key])
    if meta.get("resourceVersion"):
        out_meta["resourceVersion"] = str(meta["resourceVersion"])
    return {
        "apiVersion": vs["apiVersion"],
        "kind": vs["kind"],
        "metadata": out_meta,
        "spec": copy.deepcopy(vs.get("spec") or {}),
    }


def _set_entries(manifest: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    """Write the ownership annotation, and the LABEL_MERGED label that lets the reaper select
    VirtualServices carrying merged faults without reading every VirtualService there is."""
    annotations = manifest["metadata"].setdefault("annotations", {})
    labels = manifest["metadata"].setdefault("labels", {})
    if entries:
        ordered = sorted(entries, key=lambda e: (e["route"], e["key"]))
        annotations[ANNOTATION_FAULTS] = json.dumps(ordered, separators=(",", ":"), sort_keys=True)
        labels[LABEL_MERGED] = "true"
    else:
        annotations.pop(ANNOTATION_FAULTS, None)
        labels.pop(LABEL_MERGED, None)
        if not annotations:
            manifest["metadata"].pop("annotations")
    if not labels:
        manifest["metadata"].pop("labels")


def with_fault(vs: dict[str, Any], spec: FaultSpec, token: int) -> dict[str, Any]:
    """The VirtualService with `spec`'s fault in every http route, owned by (experiment, token)."""
    manifest = _writable(vs)
    body = _fault_body(spec)
    ((key, value),) = body.items()
    _put_fault(manifest, key, value, spec.experiment_id, token)
    # What Kiln writes stays in its namespace (a rollout object written before exportTo was set).
    manifest["spec"]["exportTo"] = list(EXPORT_TO)
    return manifest


def _put_fault(
    manifest: dict[str, Any], key: str, value: dict[str, Any], experiment_id: str, token: int
) -> None:
    """Set `fault.<key>` on every http route of `manifest`, owned by (experiment, token).

    Another experiment owning the same kind is a FaultConflict; a newer term of
    the same experiment replaces an older one, and an older term never replaces a newer.
    """
    keep = []
    for entry in fault_entries(manifest):
        if entry.get("key") != key:
            keep.append(entry)
            continue
        if str(entry.get("experiment")) != str(experiment_id):
            raise FaultConflict(
                f"experiment {entry.get('experiment')} already injects {key} into "
                f"{manifest['metadata']['name']}"
            )
        if _as_int(entry.get("token")) > int(token):
            return  # a late write of a fenced-off term: the newer term's fault stays
    for index, route in enumerate(manifest["spec"]["http"]):
        route["fault"] = {**(route.get("fault") or {}), key: copy.deepcopy(value)}
        keep.append(
            {
                "route": _route_key(route, index),
                "key": key,
                "experiment": str(experiment_id),
                "token": int(token),
            }
        )
    _set_entries(manifest, keep)


def without_fault(
    vs: dict[str, Any],
    experiment_id: str | None,
    token: int | None,
    *,
    keep_live: set | None = None,
) -> dict[str, Any] | None:
    """The VirtualService without the faults owned by (experiment, token), or None if it has none.

    With `keep_live`, remove instead every owned fault whose (experiment, token) is not in it.
    """
    entries = fault_entries(vs)

    def doomed(entry: dict[str, Any]) -> bool:
        owner = (str(entry.get("experiment")), _as_int(entry.get("token")))
        if keep_live is not None:
            return owner not in keep_live
        return owner == (str(experiment_id), int(token if token is not None else -1))

    gone = [e for e in entries if doomed(e)]
    if not gone:
        return None
    manifest = _writable(vs)
    slots = {(e["route"], e["key"]) for e in gone}
    for index, route in enumerate(manifest["spec"].get("http") or []):
        fault = dict(route.get("fault") or {})
        for key in [k for k in fault if (_route_key(route, index), k) in slots]:
            fault.pop(key)
        if fault:
            route["fault"] = fault
        else:
            route.pop("fault", None)
    _set_entries(manifest, [e for e in entries if not doomed(e)])
    return manifest


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _read_modify_write(
    backend: Any, namespace: str, name: str, change: Callable[[dict[str, Any]], dict | None]
) -> dict[str, Any] | None:
    """Apply `change(live)` with the live resourceVersion as precondition; retry on conflict."""
    for attempt in range(MERGE_ATTEMPTS):
        try:
            with backend.lock_namespace(namespace):
                live = backend.get(CHAOS_API_VS, "VirtualService", namespace, name)
                if not _is_live(live):
                    return None
                manifest = change(live)
                if manifest is None:
                    return None
                backend.apply([manifest], field_manager=MERGE_FIELD_MANAGER)
                return manifest
        except Conflict:
            if attempt == MERGE_ATTEMPTS - 1:
                raise
    return None


def merge_fault(backend: Any, spec: FaultSpec, token: int, vs_name: str) -> bool:
    """Inject `spec`'s fault into the live VirtualService `vs_name`; False if it is gone."""
    return (
        _read_modify_write(
            backend, spec.namespace, vs_name, lambda live: with_fault(live, spec, token)
        )
        is not None
    )


def unmerge_fault(backend: Any, namespace: str, name: str, experiment_id: str, token: int) -> bool:
    """Remove the faults (experiment, token) owns from one VirtualService; idempotent."""
    return (
        _read_modify_write(
            backend, namespace, name, lambda live: without_fault(live, experiment_id, token)
        )
        is not None
    )


def sweep_merged(
    backend: Any,
    live: set[tuple[str, int]],
    listed: list[dict[str, Any]],
    *,
    dry_run: bool = False,
) -> list[dict]:
    """Strip merged faults of `listed` whose (experiment, token) has no live injection; returns them.

    `listed` must be read before `live`: an owner that shows up only after the listing
    (an injection written after `live` was read) is never stripped.
    """
    found: list[dict] = []
    for vs in listed:
        if not _is_live(vs) or without_fault(vs, None, None, keep_live=live) is None:
            continue
        meta = vs["metadata"]
        ref = {**_ref(vs), "merged": True}
        found.append(ref)
        if dry_run:
            continue
        seen = {(str(e.get("experiment")), _as_int(e.get("token"))) for e in fault_entries(vs)}

        def strip(current: dict[str, Any], seen: set = seen) -> dict | None:
            now = {
                (str(e.get("experiment")), _as_int(e.get("token"))) for e in fault_entries(current)
            }
            return without_fault(current, None, None, keep_live=live | (now - seen))

        _read_modify_write(backend, meta.get("namespace") or "", meta["name"], strip)
    return found


def apply_keeping_faults(backend: Any, manifests: list[dict[str, Any]]) -> list[Any]:
    """Apply manifests, carrying into each VirtualService the faults and fault annotation of its live version.

    A rollout rebuilds its VirtualService from scratch at every step; this keeps an
    injected fault (on the route of the same name) across the re-apply. A standalone
    fault VirtualService of the same host (a fault injected before the rollout's
    VirtualService existed) is adopted: its fault moves into the routes, owned by
    the same experiment and term, and the standalone object is deleted, so the host
    is never routed by two VirtualServices.
    """
    namespaces = sorted(
        {
            (m.get("metadata") or {}).get("namespace") or ""
            for m in manifests
            if m.get("kind") == "VirtualService"
        }
    )
    for attempt in range(MERGE_ATTEMPTS):
        try:
            with ExitStack() as stack:
                for namespace in namespaces:
                    stack.enter_context(backend.lock_namespace(namespace))
                prepared: list[dict[str, Any]] = []
                adopted: list[dict[str, Any]] = []
                for manifest in manifests:
                    carried, taken = _carry_faults(backend, manifest)
                    prepared.append(carried)
                    adopted.extend(taken)
                refs = backend.apply(prepared)
                for standalone in adopted:
                    backend.delete(AppliedRef.from_dict(_ref(standalone)))
                return refs
        except Conflict:
            if attempt == MERGE_ATTEMPTS - 1:
                raise
    return []


def _carry_faults(
    backend: Any, manifest: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest with live and standalone faults of its host, and the standalone objects adopted."""
    if manifest.get("kind") != "VirtualService" or manifest.get("apiVersion") != CHAOS_API_VS:
        return manifest, []
    meta = manifest.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    live = backend.get(CHAOS_API_VS, "VirtualService", namespace, meta["name"])
    out = carry_faults(manifest, live) if _is_live(live) else copy.deepcopy(manifest)
    if is_standalone_fault(out) or not (out.get("spec") or {}).get("http"):
        return out, []
    adopted = []
    # Only Kiln's own fault objects can be adopted: select them by label instead of reading
    # (and rendering) every VirtualService of the namespace on each traffic shift.
    for other in standalone_fault_candidates(backend, namespace):
        if not (_is_live(other) and is_standalone_fault(other)):
            continue
        if not any(routes_host(other, h, namespace) for h in out["spec"].get("hosts") or []):
            continue
        labels = other["metadata"].get("labels") or {}
        owner = (labels[LABEL_EXPERIMENT], _as_int(labels.get(LABEL_TOKEN)))
        trial = copy.deepcopy(out)
        try:
            for route in (other.get("spec") or {}).get("http") or []:
                for key, value in (route.get("fault") or {}).items():
                    _put_fault(trial, key, value, *owner)
        except FaultConflict:
            continue  # another experiment holds that kind here: leave the standalone object
        out = trial
        adopted.append(other)
    return out, adopted


def standalone_fault_candidates(backend: Any, namespace: str) -> list[dict[str, Any]]:
    """Live VirtualServices of `namespace` carrying Kiln's experiment label.

    Deleting objects are never adopted, so the list leaves them out
    (`include_deleting=False`); on the simulated cluster that also spares the sweep
    for finalized objects, a scan of every deleting object on each traffic shift.
    """
    return backend.list(
        CHAOS_API_VS,
        "VirtualService",
        namespace,
        label_selector=LABEL_EXPERIMENT,
        include_deleting=False,
    )


def carry_faults(manifest: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """`manifest` with the live object's route faults (by route name) and fault annotation, and its resourceVersion."""
    out = copy.deepcopy(manifest)
    live_routes = {
        _route_key(r, i): r for i, r in enumerate((live.get("spec") or {}).get("http") or [])
    }
    for index, route in enumerate((out.get("spec") or {}).get("http") or []):
        fault = (live_routes.get(_route_key(route, index)) or {}).get("fault")
        if fault and "fault" not in route:
            route["fault"] = copy.deepcopy(fault)
    entries = fault_entries(live)
    if entries:
        out.setdefault("metadata", {})
        _set_entries(out, entries)
    version = (live.get("metadata") or {}).get("resourceVersion")
    if version:
        out["metadata"]["resourceVersion"] = str(version)
    return out
