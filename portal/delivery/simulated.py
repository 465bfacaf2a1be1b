"""The simulated cluster: a DB-backed Kubernetes stand-in with realistic delays and injectable failures.

State lives in `SimulatedObject` rows, so the web process, Celery workers and
commands all see one cluster. Controllers are simulated lazily: readiness and
finalizer clearing are derived from timestamps whenever an object is read, so
no background loop is needed and a crashed process loses nothing.
"""

from __future__ import annotations

import copy
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from portal.delivery.base import (
    AppliedRef,
    DeliveryError,
    Health,
    HealthStatus,
    desired_state,
    match_labels,
    parse_label_selector,
    ref_of,
)
from portal.models import SimulatedFailure, SimulatedObject

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
NAMESPACE_FINALIZER = "kubernetes"


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


def _active_failures() -> list[SimulatedFailure]:
    return list(SimulatedFailure.objects.filter(Q(remaining__isnull=True) | Q(remaining__gt=0)))


def _failures_for(ref: AppliedRef, active: list[SimulatedFailure]) -> list[SimulatedFailure]:
    fields = ("api_version", "kind", "namespace", "name")
    return [f for f in active if all(getattr(f, k) in ("", getattr(ref, k)) for k in fields)]


def _consume(failure: SimulatedFailure) -> None:
    if failure.remaining is not None:
        SimulatedFailure.objects.filter(pk=failure.pk, remaining__gt=0).update(
            remaining=failure.remaining - 1
        )


def _iso(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


class SimulatedBackend:
    """Delivery backend over the simulated cluster (see module docstring)."""

    name = "simulated"

    # --- writes --------------------------------------------------------------

    def apply(self, manifests: list[dict], *, field_manager: str = "kiln") -> list[AppliedRef]:
        """Create or update each manifest in order; unchanged manifests keep their generation.

        The objects before an injected apply error are applied (and committed) and
        the rest are not, as when a real apply dies half-way through.
        """
        refs = [ref_of(m) for m in manifests]  # validate all before applying any
        active = _active_failures()
        batch: list[tuple[AppliedRef, dict, list[SimulatedFailure]]] = []
        error: tuple[AppliedRef, SimulatedFailure] | None = None
        for ref, manifest in zip(refs, manifests, strict=True):
            failures = _failures_for(ref, active)
            apply_error = next(
                (f for f in failures if f.mode == SimulatedFailure.APPLY_ERROR), None
            )
            if apply_error is not None:
                error = (ref, apply_error)
                break
            batch.append((ref, desired_state(manifest), failures))
        out: list[AppliedRef] = []
        for attempt in range(2):
            try:
                with transaction.atomic():
                    out = self._apply_batch(batch, field_manager)
                break
            except IntegrityError:  # created concurrently by another worker: apply again
                if attempt:
                    raise
        if error is not None:
            _consume(error[1])
            raise DeliveryError(f"simulated apply error for {error[0]}", retryable=True)
        return out

    def _apply_batch(
        self, batch: list[tuple[AppliedRef, dict, list[SimulatedFailure]]], field_manager: str
    ) -> list[AppliedRef]:
        if not batch:
            return []
        keys = Q()
        for ref, _, _ in batch:
            keys |= Q(
                api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace, name=ref.name
            )
        existing = {
            (o.api_version, o.kind, o.namespace, o.name): o
            for o in SimulatedObject.objects.select_for_update().filter(keys)
        }
        namespaces = {ref.namespace for ref, _, _ in batch if ref.namespace}
        terminating = (
            set(
                SimulatedObject.objects.filter(
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
        for ref, desired, failures in batch:
            if ref.key not in existing and ref.kind != "Namespace" and ref.namespace in terminating:
                raise DeliveryError(f"namespace {ref.namespace} is terminating", retryable=True)
            applied = self._apply_locked(
                ref, desired, field_manager, failures, existing.get(ref.key)
            )
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

    def _apply_locked(
        self,
        ref: AppliedRef,
        desired: dict,
        field_manager: str,
        failures: list[SimulatedFailure],
        obj: SimulatedObject | None,
    ) -> AppliedRef | SimulatedObject:
        """Update an existing object in place, or return the new (unsaved) one for bulk insert."""
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
                ready_at=None if failure else now + delay,
            )
            for f in failures:
                _consume(f)
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
            obj.updated_at = now
            if failure:
                obj.failure = failure
                obj.ready_at = None
            if spec_changed:
                obj.generation += 1
                if not obj.failure:
                    obj.ready_at = now + delay
            obj.save()
            for f in failures:
                _consume(f)
        return AppliedRef(*ref.key, generation=obj.generation, uid=str(obj.uid))

    def delete(self, ref: AppliedRef) -> bool:
        """Mark the object deleting; it disappears once its finalizers clear."""
        with transaction.atomic():
            obj = (
                SimulatedObject.objects.select_for_update()
                .filter(
                    api_version=ref.api_version,
                    kind=ref.kind,
                    namespace=ref.namespace,
                    name=ref.name,
                )
                .first()
            )
            if obj is None:
                return False
            if obj.deletion_timestamp is None:
                now = timezone.now()
                obj.deletion_timestamp = now
                obj.resource_version += 1
                stuck = STUCK_FINALIZER in obj.finalizers
                obj.finalizers_clear_at = (
                    None if stuck else now + timedelta(seconds=finalizer_delay())
                )
                obj.save()
                if ref.kind == "Namespace" and ref.api_version == "v1":
                    children = SimulatedObject.objects.filter(
                        namespace=ref.name, deletion_timestamp__isnull=True
                    )
                    for child in children:
                        self.delete(
                            AppliedRef(child.api_version, child.kind, child.namespace, child.name)
                        )
        self._reconcile()
        return True

    def set_status(self, ref: AppliedRef, status: dict[str, Any]) -> None:
        """Write an object's status (what a controller would report); merged over the derived one."""
        updated = SimulatedObject.objects.filter(
            api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace, name=ref.name
        ).update(status=status, updated_at=timezone.now())
        if not updated:
            raise DeliveryError(f"{ref} does not exist", retryable=False)

    def clear_finalizers(self, ref: AppliedRef) -> None:
        """Remove every finalizer of a deleting object (what an operator does by hand)."""
        SimulatedObject.objects.filter(
            api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace, name=ref.name
        ).update(finalizers=[], finalizers_clear_at=timezone.now())
        self._reconcile()

    # --- reads -----------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        """The live object or None."""
        obj = SimulatedObject.objects.filter(
            api_version=api_version, kind=kind, namespace=namespace or "", name=name
        ).first()
        if obj is not None and obj.deletion_timestamp is not None:
            self._reconcile(
                obj.name if obj.kind == "Namespace" and obj.api_version == "v1" else None
            )
            obj = SimulatedObject.objects.filter(pk=obj.pk).first()
        return self._render(obj) if obj else None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict]:
        """Live objects of one kind, optionally in one namespace and matching a label selector."""
        self._reconcile()
        qs = SimulatedObject.objects.filter(api_version=api_version, kind=kind)
        if namespace is not None:
            qs = qs.filter(namespace=namespace)
        # The database narrows by the selector's equality and existence terms, so a selective
        # list of a crowded namespace reads only what may match; match_labels stays the judge.
        for key, op, value in parse_label_selector(label_selector):
            if op == "=" and connection.features.supports_json_field_contains:
                qs = qs.filter(labels__contains={key: value})
            elif op == "exists":
                qs = qs.filter(labels__has_key=key)
        return [
            self._render(o)
            for o in qs.order_by("namespace", "name")
            if match_labels(o.labels, label_selector)
        ]

    def health_many(self, refs: list[AppliedRef]) -> list[Health]:
        """Health of many objects with one query (deleting ones are reconciled one by one)."""
        if not refs:
            return []
        keys = Q()
        for ref in refs:
            keys |= Q(
                api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace, name=ref.name
            )
        found = {
            (o.api_version, o.kind, o.namespace, o.name): o
            for o in SimulatedObject.objects.filter(keys)
        }
        out = []
        for ref in refs:
            obj = found.get(ref.key)
            if obj is not None and obj.deletion_timestamp is not None:
                out.append(self.health(ref))
            else:
                out.append(health_of(self._render(obj) if obj else None))
        return out

    def health(self, ref: AppliedRef) -> Health:
        """Health derived from the object's Ready condition and deletion state."""
        obj = self.get(ref.api_version, ref.kind, ref.namespace, ref.name)
        return health_of(obj)

    # --- simulation ------------------------------------------------------------

    def _reconcile(self, namespace: str | None = None) -> None:
        """Remove deleting objects whose finalizers have cleared (namespaces wait for contents)."""
        now = timezone.now()
        due = SimulatedObject.objects.filter(
            deletion_timestamp__isnull=False, finalizers_clear_at__lte=now
        )
        if namespace is not None:
            due = due.filter(Q(namespace=namespace) | Q(kind="Namespace", name=namespace))
        for obj in due.exclude(kind="Namespace", api_version="v1"):
            SimulatedObject.objects.filter(pk=obj.pk).delete()
        for ns in due.filter(kind="Namespace", api_version="v1"):
            if not SimulatedObject.objects.filter(namespace=ns.name).exists():
                SimulatedObject.objects.filter(pk=ns.pk).delete()

    def _render(self, obj: SimulatedObject) -> dict:
        now = timezone.now()
        body = copy.deepcopy(obj.manifest)
        metadata = body.setdefault("metadata", {})
        metadata.update(
            {
                "uid": str(obj.uid),
                "generation": obj.generation,
                "resourceVersion": str(obj.resource_version),
                "creationTimestamp": _iso(obj.created_at),
                "finalizers": list(obj.finalizers),
            }
        )
        if obj.namespace:
            metadata["namespace"] = obj.namespace
        if obj.deletion_timestamp:
            metadata["deletionTimestamp"] = _iso(obj.deletion_timestamp)
        if obj.failure == SimulatedFailure.DEGRADED:
            ready = ("False", "SimulatedFailure", "the simulated controller reports a failure")
        elif obj.ready_at is None:
            ready = ("False", "NotReady", "waiting for the controller (never ready)")
        elif obj.ready_at > now:
            ready = ("False", "Progressing", "reconciling")
        else:
            ready = ("True", "Ready", "ready")
        status: dict[str, Any] = {
            "observedGeneration": obj.generation if ready[0] == "True" else obj.generation - 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready[0],
                    "reason": ready[1],
                    "message": ready[2],
                    "lastTransitionTime": _iso(
                        obj.ready_at if ready[0] == "True" else obj.updated_at
                    ),
                }
            ],
        }
        if obj.kind == "Namespace":
            status["phase"] = "Terminating" if obj.deletion_timestamp else "Active"
        status.update(obj.status or {})
        body["status"] = status
        return body


def health_of(obj: dict | None) -> Health:
    """Health of a live object from its metadata and Ready condition."""
    if obj is None:
        return Health(HealthStatus.MISSING, "not found")
    if obj.get("metadata", {}).get("deletionTimestamp"):
        finalizers = obj["metadata"].get("finalizers") or []
        return Health(HealthStatus.DELETING, f"waiting for finalizers {finalizers}")
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Ready", "Available", "Healthy"):
            if condition.get("status") == "True":
                return Health(HealthStatus.HEALTHY, condition.get("message", ""))
            if condition.get("reason") in ("SimulatedFailure", "Failed", "Error"):
                return Health(HealthStatus.DEGRADED, condition.get("message", ""))
            return Health(HealthStatus.PROGRESSING, condition.get("message", ""))
    return Health(HealthStatus.HEALTHY, "no readiness conditions")


def _without_metadata(manifest: dict) -> dict:
    return {k: v for k, v in manifest.items() if k != "metadata"}
