"""Chaos actuators: faults applied, reverted and swept through the cluster interface.

The objects come from `manifests.py` and the merging of faults into live
VirtualServices from `faults.py` (both pure); this module is the part that talks
to a backend (`kiln.cluster`):

- `inject` applies a term's fault: a PodChaos (and `carry_out_pod_kill`: Chaos
  Mesh kills in a real cluster, the simulated cluster deletes the pods), or the
  HTTP fault merged into every live VirtualService routing the host, or else a
  standalone fault VirtualService; `revert`, `in_effect` and `stray_objects`
  undo and inspect it, `sweep_merged` strips merged faults no live term owns.
- Every merge is a read-modify-write with the object's resourceVersion as a
  precondition, retried on a `Conflict`, inside the backend's `lock_namespace`
  (the simulated cluster serialises a namespace's writers there, so they rarely
  conflict at all).
- `apply_keeping_faults` is how a rollout re-applies its VirtualService without
  dropping an injected fault, adopting a standalone fault object of its host.

The pure names are re-exported here, so callers keep one import.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from canary.chaos.faults import (
    ANNOTATION_FAULTS,
    LABEL_MERGED,
    FaultConflict,
    FaultEffect,
    as_int,
    carry_faults,
    fault_effect,
    fault_entries,
    is_live,
    is_standalone_fault,
    may_carry_faults,
    object_ref,
    owner_of,
    owns,
    put_fault,
    routes_host,
    with_fault,
    without_fault,
)
from canary.chaos.manifests import (
    CHAOS_API_PODCHAOS,
    CHAOS_API_VS,
    FIELD_MANAGER,
    LABEL_EXPERIMENT,
    LABEL_MANAGED,
    LABEL_TOKEN,
    POD_KILL,
    FaultSpec,
    Injected,
    blast_radius,
    effective_percent,
    object_name,
    pod_chaos,
    selector_string,
    virtual_service_fault,
)
from kiln.cluster import AppliedRef, Conflict

__all__ = [
    # the read-modify-write through a backend (this module)
    "MERGE_ATTEMPTS",
    "MERGE_FIELD_MANAGER",
    "apply_keeping_faults",
    "in_effect",
    "inject",
    "merge_fault",
    "merge_targets",
    "revert",
    "simulated_fault_effect",
    "standalone_fault_candidates",
    "stray_objects",
    "sweep_merged",
    "unmerge_fault",
    # manifests.py
    "CHAOS_API_PODCHAOS",
    "CHAOS_API_VS",
    "FIELD_MANAGER",
    "LABEL_EXPERIMENT",
    "LABEL_MANAGED",
    "LABEL_TOKEN",
    "FaultSpec",
    "Injected",
    "blast_radius",
    "effective_percent",
    "object_name",
    "pod_chaos",
    "virtual_service_fault",
    # faults.py
    "ANNOTATION_FAULTS",
    "LABEL_MERGED",
    "FaultConflict",
    "FaultEffect",
    "fault_effect",
    "fault_entries",
]

MERGE_FIELD_MANAGER = "kiln"  # the rollout's field manager: both writers own the same fields

MERGE_ATTEMPTS = 5


def inject(backend: Any, spec: FaultSpec, token: int) -> Injected:
    """Apply the fault for one lease term and return what was applied; re-applying is a no-op."""
    if spec.fault == POD_KILL:
        pods = [
            p
            for p in backend.list("v1", "Pod", spec.namespace, selector_string(spec.selector))
            if is_live(p)
        ]
        count = blast_radius(len(pods), spec.max_pods, spec.max_percent)
        manifest = pod_chaos(spec, token, max(count, 0))
        backend.apply([manifest], field_manager=FIELD_MANAGER)
        victims = [p["metadata"]["name"] for p in pods[:count]]
        backend.carry_out_pod_kill(namespace=spec.namespace, pods=victims)
        return Injected(applied=[object_ref(manifest)], targets=victims)
    owner = {"experiment": spec.experiment_id, "token": int(token)}
    targets = merge_targets(backend, spec.namespace, spec.service)
    for vs in targets:
        if not may_carry_faults(vs):
            raise FaultConflict(
                f"VirtualService {vs['metadata']['name']} routes {spec.service} and is exported "
                "beyond its namespace: Kiln writes faults only into namespace-local VirtualServices"
            )
    merged = [
        {**object_ref(vs), "merged": True, **owner}
        for vs in targets
        if merge_fault(backend, spec, token, vs["metadata"]["name"])
    ]
    if merged:
        return Injected(applied=merged, targets=[spec.service])
    manifest = virtual_service_fault(spec, token)
    backend.apply([manifest], field_manager=FIELD_MANAGER)
    return Injected(applied=[{**object_ref(manifest), **owner}], targets=[spec.service])


def revert(backend: Any, applied: list[dict[str, Any]]) -> int:
    """Remove every applied fault; idempotent (missing objects count as reverted). Returns removals made.

    A standalone object is deleted. A ref that names its owner (experiment, token)
    also takes that owner's merged faults out of every VirtualService of its
    namespace, and only those: faults of other terms or experiments stay.
    """
    removed = 0
    for ref in applied:
        owner = owner_of(ref)
        if owner is not None and ref.get("kind") == "VirtualService":
            namespace = ref.get("namespace") or ""
            for vs in backend.list(CHAOS_API_VS, "VirtualService", namespace):
                if (
                    is_live(vs)
                    and owns(vs, owner)
                    and unmerge_fault(backend, namespace, vs["metadata"]["name"], *owner)
                ):
                    removed += 1
        if not ref.get("merged") and backend.delete(AppliedRef.from_dict(ref)):
            removed += 1
    return removed


def in_effect(backend: Any, applied: list[dict[str, Any]]) -> bool:
    """True if any applied object still exists (merged: still carries its owner's fault) and is not being deleted."""
    for r in applied:
        live = backend.get(r["apiVersion"], r["kind"], r.get("namespace") or "", r["name"])
        if not is_live(live):
            continue
        owner = owner_of(r)
        if not r.get("merged") or (owner is not None and owns(live, owner)):
            return True
    # A standalone fault a rollout's VirtualService adopted lives on in that VirtualService.
    for r in applied:
        owner = owner_of(r)
        if owner is None or r.get("kind") != "VirtualService" or r.get("merged"):
            continue
        for vs in backend.list(CHAOS_API_VS, "VirtualService", r.get("namespace") or ""):
            if is_live(vs) and owns(vs, owner):
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
            if token not in live_tokens and is_live(obj):
                found.append(object_ref(obj))
    return found


def simulated_fault_effect(backend: Any, namespace: str, host: str) -> FaultEffect:
    """The fault effect on `host` in `namespace`, read from the VirtualServices in the backend."""
    return fault_effect(backend.list(CHAOS_API_VS, "VirtualService", namespace), host, namespace)


def merge_targets(backend: Any, namespace: str, host: str) -> list[dict[str, Any]]:
    """Live VirtualServices (not Kiln's own fault objects) whose http routes serve `host`."""
    return [
        vs
        for vs in backend.list(CHAOS_API_VS, "VirtualService", namespace)
        if is_live(vs)
        and not is_standalone_fault(vs)
        and (vs.get("spec") or {}).get("http")
        and routes_host(vs, host, namespace)
    ]


def _read_modify_write(
    backend: Any, namespace: str, name: str, change: Callable[[dict[str, Any]], dict | None]
) -> dict[str, Any] | None:
    """Apply `change(live)` with the live resourceVersion as precondition; retry on conflict."""
    for attempt in range(MERGE_ATTEMPTS):
        try:
            with backend.lock_namespace(namespace=namespace):
                live = backend.get(CHAOS_API_VS, "VirtualService", namespace, name)
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
        if not is_live(vs) or without_fault(vs, None, None, keep_live=live) is None:
            continue
        meta = vs["metadata"]
        ref = {**object_ref(vs), "merged": True}
        found.append(ref)
        if dry_run:
            continue
        seen = {(str(e.get("experiment")), as_int(e.get("token"))) for e in fault_entries(vs)}

        def strip(current: dict[str, Any], seen: set = seen) -> dict | None:
            now = {
                (str(e.get("experiment")), as_int(e.get("token"))) for e in fault_entries(current)
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
                    stack.enter_context(backend.lock_namespace(namespace=namespace))
                prepared: list[dict[str, Any]] = []
                adopted: list[dict[str, Any]] = []
                for manifest in manifests:
                    carried, taken = _carry_faults(backend, manifest)
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
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest with live and standalone faults of its host, and the standalone objects adopted."""
    if manifest.get("kind") != "VirtualService" or manifest.get("apiVersion") != CHAOS_API_VS:
        return manifest, []
    meta = manifest.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    live = backend.get(CHAOS_API_VS, "VirtualService", namespace, meta["name"])
    out = carry_faults(manifest, live) if is_live(live) else copy.deepcopy(manifest)
    if is_standalone_fault(out) or not (out.get("spec") or {}).get("http"):
        return out, []
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
