"""A service's VirtualService, read-modify-written for rollouts and faults alike (through a backend).

Rollouts rebuild a service's VirtualService at every step; chaos experiments merge
faults into the same object. This module is the one place either writes it, called
explicitly by both (`canary.services.routing` for rollouts, `canary.chaos.actuators`
for faults); the rules of the fault entries are pure in `canary.faults`.

- `virtual_service_update` applies `change(live)` with the live resourceVersion as a
  precondition, retried on a `Conflict`, inside the backend's `lock_namespace` (the
  simulated cluster serialises a namespace's writers there, so they rarely conflict).
- `rollout_routes_write` applies a rollout's manifests keeping every injected fault,
  adopting a standalone fault object of its host; a manifest that carries a route
  intent (`canary.traffic.ANNOTATION_INTENT`) never replaces one written for a later
  intent, so a late or repeated apply of an older decision changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from canary.faults import (
    LABEL_EXPERIMENT,
    LABEL_TOKEN,
    FaultConflict,
    as_int,
    carry_faults,
    is_live,
    is_standalone_fault,
    object_ref,
    put_fault,
    routes_host,
)
from canary.traffic import ANNOTATION_INTENT, ISTIO_API
from kiln.cluster import AppliedRef, Conflict
from kiln.cluster.nodes import annotations_of

MERGE_FIELD_MANAGER = "kiln"  # the rollout's field manager: both writers own the same fields

MERGE_ATTEMPTS = 5


def virtual_service_update(
    backend: Any, namespace: str, name: str, change: Callable[[dict[str, Any]], dict | None]
) -> dict[str, Any] | None:
    """Apply `change(live)` with the live resourceVersion as precondition; retry on conflict.

    None (and nothing written) when the object is gone or `change` returns None.
    """
    for attempt in range(MERGE_ATTEMPTS):
        try:
            with backend.lock_namespace(namespace=namespace):
                live = backend.get(ISTIO_API, "VirtualService", namespace, name)
                if not is_live(live):
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


def merge_targets(backend: Any, namespace: str, host: str) -> list[dict[str, Any]]:
    """Live VirtualServices (not Kiln's own fault objects) whose http routes serve `host`."""
    return [
        vs
        for vs in backend.list(ISTIO_API, "VirtualService", namespace)
        if is_live(vs)
        and not is_standalone_fault(vs)
        and (vs.get("spec") or {}).get("http")
        and routes_host(vs, host, namespace)
    ]


__all__ = [
    "ANNOTATION_INTENT",
    "MERGE_ATTEMPTS",
    "MERGE_FIELD_MANAGER",
    "intent_of",
    "merge_targets",
    "rollout_routes_write",
    "standalone_fault_candidates",
    "virtual_service_update",
]


def intent_of(obj: dict[str, Any] | None) -> int:
    """The route intent a VirtualService was written for; -1 when none is recorded."""
    return as_int(annotations_of(obj).get(ANNOTATION_INTENT))


def rollout_routes_write(backend: Any, manifests: list[dict[str, Any]]) -> list[Any]:
    """Apply a rollout's manifests, carrying into each VirtualService the faults of its live version.

    A rollout rebuilds its VirtualService from scratch at every step; this keeps an
    injected fault (on the route of the same name) across the re-apply. A standalone
    fault VirtualService of the same host (a fault injected before the rollout's
    VirtualService existed) is adopted: its fault moves into the routes, owned by
    the same experiment and term, and the standalone object is deleted, so the host
    is never routed by two VirtualServices. When the live VirtualService was written
    for a later route intent than the manifest's, nothing is written (returns []).
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
                    stack.enter_context(backend.lock_namespace(namespace=namespace))
                prepared: list[dict[str, Any]] = []
                adopted: list[dict[str, Any]] = []
                for manifest in manifests:
                    carried, taken, superseded = _carry_faults(backend, manifest)
                    if superseded:
                        return []
                    prepared.append(carried)
                    adopted.extend(taken)
                refs = backend.apply(prepared)
                for standalone in adopted:
                    backend.delete(AppliedRef.from_dict(object_ref(standalone)))
                return refs
        except Conflict:
            if attempt == MERGE_ATTEMPTS - 1:
                raise
    return []


def _carry_faults(
    backend: Any, manifest: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """The manifest with live and standalone faults of its host, the standalone objects adopted,
    and whether the live object was written for a later route intent."""
    if manifest.get("kind") != "VirtualService" or manifest.get("apiVersion") != ISTIO_API:
        return manifest, [], False
    meta = manifest.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    live = backend.get(ISTIO_API, "VirtualService", namespace, meta["name"])
    if is_live(live) and intent_of(manifest) >= 0 and intent_of(live) > intent_of(manifest):
        return manifest, [], True
    out = carry_faults(manifest, live) if is_live(live) else copy.deepcopy(manifest)
    if is_standalone_fault(out) or not (out.get("spec") or {}).get("http"):
        return out, [], False
    adopted = []
    # Only Kiln's own fault objects can be adopted: select them by label instead of reading
    # (and rendering) every VirtualService of the namespace on each traffic shift.
    for other in standalone_fault_candidates(backend, namespace):
        if not (is_live(other) and is_standalone_fault(other)):
            continue
        if not any(routes_host(other, h, namespace) for h in out["spec"].get("hosts") or []):
            continue
        labels = other["metadata"].get("labels") or {}
        owner = (labels[LABEL_EXPERIMENT], as_int(labels.get(LABEL_TOKEN)))
        trial = copy.deepcopy(out)
        try:
            for route in (other.get("spec") or {}).get("http") or []:
                for key, value in (route.get("fault") or {}).items():
                    put_fault(trial, key, value, *owner)
        except FaultConflict:
            continue  # another experiment holds that kind here: leave the standalone object
        out = trial
        adopted.append(other)
    return out, adopted, False


def standalone_fault_candidates(backend: Any, namespace: str) -> list[dict[str, Any]]:
    """Live VirtualServices of `namespace` carrying Kiln's experiment label.

    Deleting objects are never adopted, so the list leaves them out
    (`include_deleting=False`); on the simulated cluster that also spares the sweep
    for finalized objects, a scan of every deleting object on each traffic shift.
    """
    return backend.list(
        ISTIO_API,
        "VirtualService",
        namespace,
        label_selector=LABEL_EXPERIMENT,
        include_deleting=False,
    )
