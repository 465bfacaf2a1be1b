"""Chaos actuators: faults applied, reverted and swept through the cluster interface.

The objects come from `manifests.py` and the merging of faults into live
VirtualServices from `faults.py` (both pure); this module is the part that talks
to a backend (`kiln.cluster`):

- `inject` applies a term's fault: a PodChaos (and `carry_out_pod_kill`: Chaos
  Mesh kills in a real cluster, the simulated cluster deletes the pods), or the
  HTTP fault merged into every live VirtualService routing the host, or else a
  standalone fault VirtualService; `revert`, `in_effect` and `stray_objects`
  undo and inspect it, `sweep_merged` strips merged faults no live term owns.
- Every merge is a read-modify-write through `canary.routes.virtual_service_update`,
  the one module that writes a service's VirtualService for rollouts and faults alike
  (a rollout's re-apply, keeping injected faults, is `canary.routes.rollout_routes_write`).

The pure names are re-exported here, so callers keep one import.
"""

from __future__ import annotations

from typing import Any

from canary.chaos import chaos_mesh, kinds, verify
from canary.chaos.faults import with_fault
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
    labels_for,
    object_name,
    pod_chaos,
    selector_string,
    virtual_service_fault,
)
from canary.faults import (
    ANNOTATION_FAULTS,
    LABEL_MERGED,
    FaultConflict,
    FaultEffect,
    as_int,
    fault_effect,
    fault_entries,
    is_live,
    may_carry_faults,
    object_ref,
    owner_of,
    owns,
    without_fault,
)
from canary.routes import (
    MERGE_ATTEMPTS,
    MERGE_FIELD_MANAGER,
    merge_targets,
    standalone_fault_candidates,
    virtual_service_update,
)
from kiln.cluster import AppliedRef

# Every kind of object that carries a fault, as the reaper's sweep lists them.
FAULT_OBJECT_KINDS: tuple[tuple[str, str], ...] = (
    (CHAOS_API_VS, "VirtualService"),
    (CHAOS_API_PODCHAOS, "PodChaos"),
    *((kinds.CHAOS_MESH_API, kind) for kind in kinds.OBJECT_KINDS),
)


__all__ = [
    # the read-modify-write through a backend (this module)
    "FAULT_OBJECT_KINDS",
    "object_kind_of",
    "read_back",
    "MERGE_ATTEMPTS",
    "MERGE_FIELD_MANAGER",
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


def object_kind_of(fault: str) -> tuple[str, str]:
    """(apiVersion, kind) of the object that carries `fault` (standalone, for HTTP faults)."""
    if fault == POD_KILL:
        return CHAOS_API_PODCHAOS, "PodChaos"
    if kinds.is_chaos_mesh(fault):
        return kinds.CHAOS_MESH_API, kinds.KINDS[fault].object_kind
    return CHAOS_API_VS, "VirtualService"


def _inject_chaos_mesh(backend: Any, spec: FaultSpec, token: int) -> Injected:
    """A Chaos Mesh object naming the pods the blast radius allows, by name."""
    pods = [
        p
        for p in backend.list("v1", "Pod", spec.namespace, selector_string(spec.selector))
        if is_live(p)
    ]
    count = kinds.pods_within(len(pods), spec.max_pods, spec.max_percent, spec.fault)
    victims = [p["metadata"]["name"] for p in pods[:count]]
    if not victims:
        # Nothing matches within the blast radius: this term injects nothing (and says so).
        return Injected(applied=[], targets=[])
    manifest = chaos_mesh.chaos_object(
        fault=spec.fault,
        name=object_name(spec, token),
        namespace=spec.namespace,
        labels=labels_for(spec, token),
        params=spec.params,
        pods=victims,
        max_duration_seconds=spec.max_duration_seconds,
    )
    backend.apply([manifest], field_manager=FIELD_MANAGER)
    owner = {"experiment": spec.experiment_id, "token": int(token)}
    return Injected(applied=[{**object_ref(manifest), **owner}], targets=victims)


def inject(backend: Any, spec: FaultSpec, token: int) -> Injected:
    """Apply the fault for one lease term and return what was applied; re-applying is a no-op."""
    if kinds.is_chaos_mesh(spec.fault):
        return _inject_chaos_mesh(backend, spec, token)
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


def read_back(backend: Any, applied: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Read every object a revert touched back through the cluster: the residue of the fault, if any.

    Empty means confirmed gone (`verify.py` says what gone means per kind); a read that fails
    is evidence too, as it confirms nothing. A fault owner's merged entries are looked for in
    every VirtualService of the namespace, where a rollout may have adopted them.
    """
    evidence: list[dict[str, Any]] = []
    for ref in applied:
        if not ref.get("merged"):
            try:
                live = backend.get(
                    ref["apiVersion"], ref["kind"], ref.get("namespace") or "", ref["name"]
                )
            except Exception as exc:  # noqa: BLE001 - whatever the cluster answered, nothing is confirmed
                evidence.append(verify.read_error(ref, exc))
                continue
            found = verify.residue(ref, live)
            if found is not None:
                evidence.append(found)
        owner = owner_of(ref)
        if owner is None or ref.get("kind") != "VirtualService":
            continue
        try:
            listed = backend.list(CHAOS_API_VS, "VirtualService", ref.get("namespace") or "")
        except Exception as exc:  # noqa: BLE001 - as above
            evidence.append(verify.read_error(ref, exc))
            continue
        for vs in listed:
            found = verify.adopted_residue(owner, vs)
            if found is not None and found not in evidence:
                evidence.append(found)
    return evidence


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
    for api_version, kind in FAULT_OBJECT_KINDS:
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


def merge_fault(backend: Any, spec: FaultSpec, token: int, vs_name: str) -> bool:
    """Inject `spec`'s fault into the live VirtualService `vs_name`; False if it is gone."""
    return (
        virtual_service_update(
            backend, spec.namespace, vs_name, lambda live: with_fault(live, spec, token)
        )
        is not None
    )


def unmerge_fault(backend: Any, namespace: str, name: str, experiment_id: str, token: int) -> bool:
    """Remove the faults (experiment, token) owns from one VirtualService; idempotent."""
    return (
        virtual_service_update(
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

        virtual_service_update(backend, meta.get("namespace") or "", meta["name"], strip)
    return found
