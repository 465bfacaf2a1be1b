"""The simulated cluster's write of one object: server-side apply's effect on a row (finalizers,
readiness, generation, resourceVersion), with the failures injected for it; and a merge patch
of one object's annotations."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from kiln.cluster.admission import A_DEFAULT_TOLERATIONS, A_NODE_SELECTOR, admit_pod
from kiln.cluster.base import AppliedRef, Conflict, DeliveryError
from kiln.cluster.models import SimulatedFailure, SimulatedObject
from kiln.cluster.simulated_failures import STUCK_FINALIZER, consume, ready_delay
from kiln.cluster.simulated_rows import any_of, locked_row

# One object to apply: its reference, desired state, injected failures, expected resourceVersion.
Batch = list[tuple[AppliedRef, dict, list[SimulatedFailure], str | None]]

NAMESPACE_FINALIZER = "kubernetes"


def _apply_one(
    cluster: str,
    ref: AppliedRef,
    desired: dict,
    field_manager: str,
    failures: list[SimulatedFailure],
    obj: SimulatedObject | None,
) -> AppliedRef | SimulatedObject:
    """Update an existing (locked) object in place, or return the new unsaved one of `cluster`
    for a bulk insert; `failures` injected for it decide its finalizers and readiness."""
    now = timezone.now()
    modes = {f.mode for f in failures}
    metadata = desired.get("metadata") or {}
    finalizers = list(metadata.get("finalizers") or [])
    if ref.kind == "Namespace" and NAMESPACE_FINALIZER not in finalizers:
        finalizers.append(NAMESPACE_FINALIZER)
    if SimulatedFailure.STUCK_FINALIZER in modes and STUCK_FINALIZER not in finalizers:
        finalizers.append(STUCK_FINALIZER)
    failure = ""
    if SimulatedFailure.DEGRADED in modes:
        failure = SimulatedFailure.DEGRADED
    elif SimulatedFailure.NEVER_READY in modes:
        failure = SimulatedFailure.NEVER_READY
    delay = timedelta(seconds=ready_delay(ref.kind))
    if obj is None:
        obj = SimulatedObject(
            cluster=cluster,
            api_version=ref.api_version,
            kind=ref.kind,
            namespace=ref.namespace,
            name=ref.name,
            uid=uuid.uuid4(),
            manifest=desired,
            labels=dict(metadata.get("labels") or {}),
            finalizers=finalizers,
            field_manager=field_manager,
            failure=failure,
            created_at=now,
            updated_at=now,
            applied_at=now,
            ready_at=None if failure else now + delay,
        )
        for f in failures:
            consume(f)
        return obj
    if obj.deletion_timestamp is not None:
        raise DeliveryError(f"{ref} is being deleted", retryable=True)
    if obj.manifest != desired or obj.finalizers != finalizers:
        spec_changed = _without_metadata(obj.manifest) != _without_metadata(desired)
        obj.manifest = desired
        obj.labels = dict(metadata.get("labels") or {})
        obj.finalizers = finalizers
        obj.field_manager = field_manager
        obj.resource_version += 1
        obj.updated_at = obj.applied_at = now
        if failure:
            obj.failure = failure
            obj.ready_at = None
        if spec_changed:
            obj.generation += 1
            if not obj.failure:
                obj.ready_at = now + delay
        obj.save()
        for f in failures:
            consume(f)
    return AppliedRef(*ref.key, generation=obj.generation, uid=str(obj.uid))


def apply_batch(
    objects: QuerySet, *, cluster: str, batch: Batch, field_manager: str
) -> list[AppliedRef]:
    """Apply a batch of (ref, desired state, failures, expected resourceVersion) inside the
    caller's transaction: every precondition is checked on the locked rows before anything is
    written, and new objects are inserted together."""
    if not batch:
        return []
    keys = any_of(ref for ref, *_ in batch)
    existing = {
        (o.api_version, o.kind, o.namespace, o.name): o
        for o in objects.select_for_update().filter(keys)
    }
    # Preconditions are checked on the locked rows before anything is written: a stale
    # one fails the whole batch, as the API server would fail that object's write.
    for ref, _, _, expected in batch:
        if expected is None:
            continue
        obj = existing.get(ref.key)
        if obj is None or str(obj.resource_version) != expected:
            found = "is gone" if obj is None else f"is at {obj.resource_version}"
            raise Conflict(f"{ref} {found}, not resourceVersion {expected}")
    namespaces = {ref.namespace for ref, _, _, _ in batch if ref.namespace}
    terminating = (
        set(
            objects.filter(
                api_version="v1",
                kind="Namespace",
                name__in=namespaces,
                deletion_timestamp__isnull=False,
            ).values_list("name", flat=True)
        )
        if namespaces
        else set()
    )
    out: list[AppliedRef | SimulatedObject] = []
    created: list[SimulatedObject] = []
    admission = pod_admission(objects, [ref for ref, *_ in batch], existing)
    for ref, desired, failures, _ in batch:
        if ref.key not in existing and ref.kind != "Namespace" and ref.namespace in terminating:
            raise DeliveryError(f"namespace {ref.namespace} is terminating", retryable=True)
        if ref.namespace in admission and ref.kind == "Pod" and ref.key not in existing:
            desired = admit_pod(desired, admission[ref.namespace])
        applied = _apply_one(cluster, ref, desired, field_manager, failures, existing.get(ref.key))
        if isinstance(applied, SimulatedObject):
            created.append(applied)
        out.append(applied)
    # New objects are inserted together: one statement however many the environment has.
    SimulatedObject.objects.bulk_create(created)
    return [
        AppliedRef(o.api_version, o.kind, o.namespace, o.name, o.generation, str(o.uid))
        if isinstance(o, SimulatedObject)
        else o
        for o in out
    ]


def _without_metadata(manifest: dict) -> dict:
    return {k: v for k, v in manifest.items() if k != "metadata"}


def annotate_one(*, cluster: str, ref: AppliedRef, annotations: dict[str, str | None]) -> bool:
    """Merge `annotations` into the object's metadata under its row lock (None removes a key);
    resourceVersion moves only when something changed. False if the object does not exist."""
    with transaction.atomic():
        obj = locked_row(cluster=cluster, ref=ref)
        if obj is None:
            return False
        metadata = dict(obj.manifest.get("metadata") or {})
        current = dict(metadata.get("annotations") or {})
        wanted = dict(current)
        for key, value in annotations.items():
            if value is None:
                wanted.pop(key, None)
            else:
                wanted[key] = str(value)
        if wanted != current:
            obj.manifest = {**obj.manifest, "metadata": {**metadata, "annotations": wanted}}
            obj.resource_version += 1
            obj.updated_at = timezone.now()
            obj.save(update_fields=["manifest", "resource_version", "updated_at"])
    return True


def pod_admission(objects, refs: list[AppliedRef], existing: dict) -> dict[str, dict[str, str]]:
    """The annotations of the namespaces new pods among `refs` are created in, for the admission
    plugins that put them on their environment's node pool (`kiln.cluster.admission`)."""
    namespaces = {
        ref.namespace
        for ref in refs
        if ref.kind == "Pod" and ref.api_version == "v1" and ref.key not in existing
    }
    if not namespaces:
        return {}
    out = {}
    rows = objects.filter(api_version="v1", kind="Namespace", name__in=namespaces)
    for name, manifest in rows.values_list("name", "manifest"):
        annotations = (manifest.get("metadata") or {}).get("annotations") or {}
        if A_NODE_SELECTOR in annotations or A_DEFAULT_TOLERATIONS in annotations:
            out[name] = annotations
    return out
