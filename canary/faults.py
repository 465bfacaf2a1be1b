"""Faults merged into a VirtualService that already routes the host, and what faults do to traffic.

Pure: dictionaries in, dictionaries out; no Django and no backend. Rollouts and chaos
experiments both write a service's VirtualService, so the rules of its fault entries
live in canary, below both; the read-modify-write around them is `canary.routes`.

On a mesh, two VirtualServices for one host are not merged for sidecar traffic
(one wins), so when a live VirtualService already routes the fault's host the
fault goes INTO its http routes (`HTTPRoute.fault`). The annotation
`kiln.dev/chaos-faults` lists who owns each merged fault key (route,
delay|abort) by experiment id and fencing token: a revert removes only the keys
its own term owns, so an old term never removes a newer term's fault, and the
reaper strips keys no live injection accounts for.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from canary.traffic import MANAGED_BY

ANNOTATION_FAULTS = "kiln.dev/chaos-faults"

LABEL_EXPERIMENT = "kiln.dev/chaos-experiment"  # on Kiln's own fault objects

LABEL_TOKEN = "kiln.dev/chaos-token"  # noqa: S105 - a label key, not a secret

LABEL_MERGED = "kiln.dev/chaos-merged"  # set while ANNOTATION_FAULTS lists any fault


class FaultConflict(Exception):
    """Another experiment already injects the same fault kind into the same route."""


@dataclass(frozen=True)
class FaultEffect:
    """What faults in the cluster do to one host's traffic: extra failed share and mean added latency."""

    error_rate: float = 0.0
    added_latency_ms: float = 0.0
    delayed_share: float = 0.0


def is_live(obj: dict | None) -> bool:
    """True for an object that exists and is not being deleted."""
    return obj is not None and not (obj.get("metadata") or {}).get("deletionTimestamp")


def object_ref(obj: dict[str, Any]) -> dict[str, Any]:
    """An object's identity as a stored ref: apiVersion, kind, namespace, name."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "namespace": meta.get("namespace") or "",
        "name": meta["name"],
    }


def as_int(value: Any) -> int:
    """`value` as an int, or -1 when it is not one (a token read from a label or an annotation)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


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


def owner_of(ref: dict[str, Any]) -> tuple[str, int] | None:
    """The (experiment, token) a stored ref names, or None for a ref without an owner."""
    if "experiment" not in ref or "token" not in ref:
        return None
    return (str(ref["experiment"]), as_int(ref["token"]))


def owns(vs: dict[str, Any], owner: tuple[str, int]) -> bool:
    """True if `owner` owns any merged fault of the VirtualService."""
    return any(
        (str(e.get("experiment")), as_int(e.get("token"))) == owner for e in fault_entries(vs)
    )


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


def route_key(route: dict[str, Any], index: int) -> str:
    """How an http route is named in the ownership annotation: its name, else `#<index>`."""
    return route.get("name") or f"#{index}"


def writable(vs: dict[str, Any]) -> dict[str, Any]:
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


def set_entries(manifest: dict[str, Any], entries: list[dict[str, Any]]) -> None:
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


def put_fault(
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
        if as_int(entry.get("token")) > int(token):
            return  # a late write of a fenced-off term: the newer term's fault stays
    for index, route in enumerate(manifest["spec"]["http"]):
        route["fault"] = {**(route.get("fault") or {}), key: copy.deepcopy(value)}
        keep.append(
            {
                "route": route_key(route, index),
                "key": key,
                "experiment": str(experiment_id),
                "token": int(token),
            }
        )
    set_entries(manifest, keep)


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
        owner = (str(entry.get("experiment")), as_int(entry.get("token")))
        if keep_live is not None:
            return owner not in keep_live
        return owner == (str(experiment_id), int(token if token is not None else -1))

    gone = [e for e in entries if doomed(e)]
    if not gone:
        return None
    manifest = writable(vs)
    slots = {(e["route"], e["key"]) for e in gone}
    for index, route in enumerate(manifest["spec"].get("http") or []):
        fault = dict(route.get("fault") or {})
        for key in [k for k in fault if (route_key(route, index), k) in slots]:
            fault.pop(key)
        if fault:
            route["fault"] = fault
        else:
            route.pop("fault", None)
    set_entries(manifest, [e for e in entries if not doomed(e)])
    return manifest


def carry_faults(manifest: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """`manifest` with the live object's route faults (by route name) and fault annotation, and its resourceVersion."""
    out = copy.deepcopy(manifest)
    live_routes = {
        route_key(r, i): r for i, r in enumerate((live.get("spec") or {}).get("http") or [])
    }
    for index, route in enumerate((out.get("spec") or {}).get("http") or []):
        fault = (live_routes.get(route_key(route, index)) or {}).get("fault")
        if fault and "fault" not in route:
            route["fault"] = copy.deepcopy(fault)
    entries = fault_entries(live)
    if entries:
        out.setdefault("metadata", {})
        set_entries(out, entries)
    version = (live.get("metadata") or {}).get("resourceVersion")
    if version:
        out["metadata"]["resourceVersion"] = str(version)
    return out


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
        if not is_live(vs) or not routes_host(vs, host, namespace):
            continue
        owners = {
            (e.get("route"), e.get("key")): (str(e.get("experiment")), as_int(e.get("token")))
            for e in fault_entries(vs)
        }
        for index, route in enumerate((vs.get("spec") or {}).get("http") or []):
            fault = dict(route.get("fault") or {})
            for key in list(fault):
                owner = owners.get((route_key(route, index), key))
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
                latency += duration_ms(delay["fixedDelay"]) * share
                delayed = max(delayed, share)
    return FaultEffect(
        error_rate=round(1.0 - survive, 6), added_latency_ms=latency, delayed_share=delayed
    )


def duration_ms(text: str) -> float:
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
