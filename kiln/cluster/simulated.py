"""The simulated cluster: a DB-backed Kubernetes stand-in with realistic delays and injectable failures.

State lives in `SimulatedObject` rows, so the web process, Celery workers and
commands all see one cluster. Controllers are simulated lazily: readiness and
finalizer clearing are derived from timestamps whenever an object is read, so
no background loop is needed and a crashed process loses nothing. Timing and
failure injection are in `simulated_failures`, reading a row back in
`simulated_render`.

It honours `metadata.resourceVersion` preconditions as the API server does (a
stale one is a `Conflict`), and `lock_namespace` serialises writers of one
namespace on the namespace's row so that, under the lock, they do not conflict.

A little over 400 lines: it is the one class that implements the whole backend
protocol (writes, reads, coordination, the lazy finalizer controller); its parts
that stand alone already live beside it (`simulated_write`, `simulated_bulk`,
`simulated_render`, `simulated_failures`, `simulated_tenant`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from kiln.cluster import simulated_bulk
from kiln.cluster.admission import admit_pod
from kiln.cluster.base import (
    AppliedRef,
    Conflict,
    DeliveryError,
    Health,
    LeaseMirror,
    PodBinding,
    desired_state,
    health_of,
    host_label,
    match_labels,
    may_route_host,
    parse_label_selector,
    precondition_of,
    ref_of,
    secret_manifest,
)
from kiln.cluster.models import SimulatedFailure, SimulatedObject
from kiln.cluster.simulated_failures import (
    STUCK_FINALIZER,
    active_failures,
    consume,
    failures_for,
    finalizer_delay,
)
from kiln.cluster.simulated_render import render
from kiln.cluster.simulated_scale import scale_one
from kiln.cluster.simulated_tenant import TCP, TenantAuditWebhook, tenant_cluster
from kiln.cluster.simulated_write import annotate_one, apply_one, pod_admission
from kiln.cluster.tree import ObjectState, state_of

Batch = list[tuple[AppliedRef, dict, list[SimulatedFailure], str | None]]


class SimulatedBackend:
    """Delivery backend over the simulated cluster (see module docstring)."""

    name = "simulated"
    syncs_gitops = False  # no Argo CD here: the gitops backend applies its commits itself
    simulates_traffic = True  # its traffic is drawn from its VirtualServices
    simulates_scheduling = True  # Kiln's simulated Karpenter and kube-scheduler act on it

    def __init__(self, cluster: str = "", *, audit: TenantAuditWebhook | None = None) -> None:
        """The host cluster, or (`cluster` from `tenant_cluster`) a tenant control plane's API
        server, whose requests its `audit` webhook records."""
        self.cluster = cluster
        self.audit = audit

    def _objects(self) -> QuerySet:
        return SimulatedObject.objects.filter(cluster=self.cluster)

    # --- writes --------------------------------------------------------------

    def apply(self, manifests: list[dict], *, field_manager: str = "kiln") -> list[AppliedRef]:
        """Create or update each manifest in order; unchanged manifests keep their generation.

        The objects before an injected apply error are applied (and committed) and
        the rest are not, as when a real apply dies half-way through.
        """
        refs = [ref_of(m) for m in manifests]  # validate all before applying any
        active = active_failures()
        batch: Batch = []
        error: tuple[AppliedRef, SimulatedFailure] | None = None
        for ref, manifest in zip(refs, manifests, strict=True):
            failures = failures_for(ref, active)
            apply_error = next(
                (f for f in failures if f.mode == SimulatedFailure.APPLY_ERROR), None
            )
            if apply_error is not None:
                error = (ref, apply_error)
                break
            batch.append((ref, desired_state(manifest), failures, precondition_of(manifest)))
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
            consume(error[1])
            raise DeliveryError(f"simulated apply error for {error[0]}", retryable=True)
        if self.audit is not None:
            self.audit.record("patch", [(ref, 200) for ref in refs])
        return out

    def _apply_batch(self, batch: Batch, field_manager: str) -> list[AppliedRef]:
        if not batch:
            return []
        keys = Q()
        for ref, _, _, _ in batch:
            keys |= Q(
                api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace, name=ref.name
            )
        existing = {
            (o.api_version, o.kind, o.namespace, o.name): o
            for o in self._objects().select_for_update().filter(keys)
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
                self._objects()
                .filter(
                    api_version="v1",
                    kind="Namespace",
                    name__in=namespaces,
                    deletion_timestamp__isnull=False,
                )
                .values_list("name", flat=True)
            )
            if namespaces
            else set()
        )
        out: list[AppliedRef | SimulatedObject] = []
        created: list[SimulatedObject] = []
        admission = pod_admission(self._objects(), [ref for ref, *_ in batch], existing)
        for ref, desired, failures, _ in batch:
            if ref.key not in existing and ref.kind != "Namespace" and ref.namespace in terminating:
                raise DeliveryError(f"namespace {ref.namespace} is terminating", retryable=True)
            if ref.namespace in admission and ref.kind == "Pod" and ref.key not in existing:
                desired = admit_pod(desired, admission[ref.namespace])
            applied = apply_one(
                cluster=self.cluster,
                ref=ref,
                desired=desired,
                field_manager=field_manager,
                failures=failures,
                obj=existing.get(ref.key),
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

    def delete(self, ref: AppliedRef) -> bool:
        """Mark the object deleting; it disappears once its finalizers clear.

        A Namespace takes its contents with it: they are marked deleting together, with one
        write, and each deletion is audited as the namespace controller's would be.
        """
        existed = self._mark_deleting(ref)
        if existed:
            self._reconcile(_scope(ref.api_version, ref.kind, ref.namespace, ref.name))
        if self.audit is not None:  # audited after the request completes, 404 included
            self.audit.record("delete", [(ref, 200 if existed else 404)])
        return existed

    def _mark_deleting(self, ref: AppliedRef) -> bool:
        with transaction.atomic():
            obj = (
                self._objects()
                .select_for_update()
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
                _start_deletion(obj, now)
                obj.save(update_fields=DELETION_FIELDS)
                if ref.kind == "Namespace" and ref.api_version == "v1":
                    children = list(
                        self._objects()
                        .select_for_update()
                        .filter(namespace=ref.name, deletion_timestamp__isnull=True)
                        .order_by("namespace", "name")
                    )
                    for child in children:
                        _start_deletion(child, now)
                    SimulatedObject.objects.bulk_update(children, DELETION_FIELDS)
                    for child in children if self.audit is not None else ():
                        key = (child.api_version, child.kind, child.namespace, child.name)
                        self.audit.record("delete", [(AppliedRef(*key), 200)])
        return True

    def set_status(self, ref: AppliedRef, status: dict[str, Any]) -> None:
        """Write an object's status (what a controller would report); merged over the derived one."""
        updated = (
            self._objects()
            .filter(
                api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace, name=ref.name
            )
            .update(status=status, updated_at=timezone.now())
        )
        if not updated:
            raise DeliveryError(f"{ref} does not exist", retryable=False)

    def update_status(self, updates: list[tuple[AppliedRef, dict[str, Any]]]) -> int:
        """Status writes, a chunk of rows per statement (`simulated_bulk`)."""
        return simulated_bulk.update_status(updates, cluster=self.cluster)

    def bind_pods(self, bindings: list[PodBinding]) -> int:
        """Pod bindings, a chunk of rows per statement (`simulated_bulk`)."""
        return simulated_bulk.bind_pods(bindings, cluster=self.cluster)

    def annotate(self, ref: AppliedRef, annotations: dict[str, str | None]) -> bool:
        """A merge patch of the object's annotations (`simulated_write.annotate_one`)."""
        found = annotate_one(cluster=self.cluster, ref=ref, annotations=annotations)
        if self.audit is not None:
            self.audit.record("patch", [(ref, 200 if found else 404)])
        return found

    def scale(self, ref: AppliedRef, replicas: int) -> int | None:
        """The scale subresource's write (`simulated_write.scale_one`)."""
        before = scale_one(cluster=self.cluster, ref=ref, replicas=replicas)
        if self.audit is not None:
            self.audit.record("update", [(ref, 404 if before is None else 200)])
        return before

    def write_secret(
        self, *, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]
    ) -> AppliedRef:
        """Apply the Secret to this cluster (what a controller's write of it does)."""
        manifest = secret_manifest(namespace=namespace, name=name, data=data, labels=labels)
        return self.apply([manifest])[0]

    def tenant(self, *, namespace: str, name: str) -> SimulatedBackend | None:
        """The TenantControlPlane's own API server, once the control plane is ready; its
        objects go with the control plane, and its requests are audited to its webhook."""
        if self.cluster or not self.health(AppliedRef(*TCP, namespace, name)).ready:
            return None
        return SimulatedBackend(
            tenant_cluster(namespace, name), audit=TenantAuditWebhook(self, namespace, name)
        )

    def clear_finalizers(self, ref: AppliedRef) -> None:
        """Remove every finalizer of a deleting object (what an operator does by hand)."""
        self._objects().filter(
            api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace, name=ref.name
        ).update(finalizers=[], finalizers_clear_at=timezone.now())
        self._reconcile()

    # --- reads -----------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        """The live object or None."""
        obj = (
            self._objects()
            .filter(api_version=api_version, kind=kind, namespace=namespace or "", name=name)
            .first()
        )
        if obj is not None and obj.deletion_timestamp is not None:
            self._reconcile(_scope(obj.api_version, obj.kind, obj.namespace, obj.name))
            obj = self._objects().filter(pk=obj.pk).first()
        return render(obj) if obj else None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        include_deleting: bool = True,
        routing_host: str | None = None,
    ) -> list[dict]:
        """Objects of one kind, by namespace, label selector, deletion and routed host."""
        qs = self._objects().filter(api_version=api_version, kind=kind)
        if include_deleting:
            # Only the listed namespace's deleting objects can be in the answer.
            self._reconcile(namespace)
        else:
            # A reconcile only removes deleting objects, which this read leaves out anyway:
            # skipping it spares a scan of every deleting object in the cluster.
            qs = qs.filter(deletion_timestamp__isnull=True)
        if namespace is not None:
            qs = qs.filter(namespace=namespace)
        if routing_host is not None:
            qs = _routing_prefilter(qs, routing_host)
        # The database narrows by the selector's equality and existence terms, so a selective
        # list of a crowded namespace reads only what may match; match_labels stays the judge.
        for key, op, value in parse_label_selector(label_selector):
            if op == "=" and connection.features.supports_json_field_contains:
                qs = qs.filter(labels__contains={key: value})
            elif op == "exists":
                qs = qs.filter(labels__has_key=key)
        rendered = (
            render(o, fresh=True)
            for o in qs.order_by("namespace", "name")
            if match_labels(o.labels, label_selector)
        )
        return [o for o in rendered if routing_host is None or may_route_host(o, routing_host)]

    def list_kinds(self, kinds: Sequence[tuple[str, str]], namespace: str) -> list[dict]:
        """One reconcile of the namespace and one read of every listed kind in it."""
        if not kinds:
            return []
        self._reconcile(namespace)
        wanted = Q()
        for api_version, kind in kinds:
            wanted |= Q(api_version=api_version, kind=kind)
        by_kind: dict[tuple[str, str], list[dict]] = {kind: [] for kind in kinds}
        for obj in self._objects().filter(wanted, namespace=namespace).order_by("name"):
            by_kind[(obj.api_version, obj.kind)].append(render(obj, fresh=True))
        return [o for kind in kinds for o in by_kind[kind]]

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
            (o.api_version, o.kind, o.namespace, o.name): o for o in self._objects().filter(keys)
        }
        out = []
        for ref in refs:
            obj = found.get(ref.key)
            if obj is not None and obj.deletion_timestamp is not None:
                out.append(self.health(ref))
            else:
                out.append(health_of(render(obj) if obj else None))
        return out

    def describe(self, refs: list[AppliedRef]) -> list[ObjectState]:
        """Each object as applied here: live is Synced, gone is OutOfSync (`kiln.cluster.tree`)."""
        return [state_of(ref, self.get(*ref.key)) for ref in refs]

    def health(self, ref: AppliedRef) -> Health:
        """Health derived from the object's Ready condition and deletion state."""
        obj = self.get(ref.api_version, ref.kind, ref.namespace, ref.name)
        return health_of(obj)

    # --- coordination ------------------------------------------------------------

    @contextmanager
    def lock_namespace(self, *, namespace: str) -> Iterator[None]:
        """Lock the namespace's row for the block: its read-modify-writes run one at a time."""
        with transaction.atomic():
            list(
                self._objects()
                .select_for_update()
                .filter(api_version="v1", kind="Namespace", name=namespace)
                .values_list("pk", flat=True)
            )
            yield

    def carry_out_pod_kill(self, *, namespace: str, pods: list[str]) -> list[str]:
        """No Chaos Mesh runs here: delete the pods as its controller would; returns those deleted."""
        return [name for name in pods if self.delete(AppliedRef("v1", "Pod", namespace, name))]

    def lease_mirror(self, *, namespace: str, name: str) -> LeaseMirror | None:
        """None: the simulated cluster keeps no Lease objects; the database lease alone holds."""
        return None

    # --- simulation ------------------------------------------------------------

    def deleting_due(self, now) -> QuerySet:
        """Deleting objects whose finalizers have cleared by `now` (a partial index holds only
        deleting objects, so this never reads the live ones)."""
        return self._objects().filter(
            deletion_timestamp__isnull=False, finalizers_clear_at__lte=now
        )

    def _reconcile(self, namespace: str | None = None) -> None:
        """Remove deleting objects whose finalizers have cleared (namespaces wait for contents).

        `namespace` narrows it to the objects of one namespace and the Namespace itself ("":
        the cluster-scoped objects); None is the whole cluster.
        """
        due = self.deleting_due(timezone.now())
        if namespace is not None:
            due = due.filter(Q(namespace=namespace) | Q(kind="Namespace", name=namespace))
        gone = list(
            due.exclude(kind="Namespace", api_version="v1").values_list(
                "pk", "api_version", "kind", "namespace", "name"
            )
        )
        if gone:
            self._objects().filter(pk__in=[pk for pk, *_ in gone]).delete()
        for _, api_version, kind, obj_namespace, name in gone:
            if (api_version, kind) == TCP:  # its API server's datastore goes with it
                SimulatedObject.objects.filter(cluster=tenant_cluster(obj_namespace, name)).delete()
        for ns in due.filter(kind="Namespace", api_version="v1"):
            if not self._objects().filter(namespace=ns.name).exists():
                self._objects().filter(pk=ns.pk).delete()


DELETION_FIELDS = ["deletion_timestamp", "resource_version", "finalizers_clear_at"]


def _start_deletion(obj: SimulatedObject, now) -> None:
    """Set an object deleting as of `now`: its finalizers clear after the simulated delay."""
    obj.deletion_timestamp = now
    obj.resource_version += 1
    stuck = STUCK_FINALIZER in obj.finalizers
    obj.finalizers_clear_at = None if stuck else now + timedelta(seconds=finalizer_delay())


def _scope(api_version: str, kind: str, namespace: str, name: str) -> str:
    """The namespace whose reconcile can remove this object: a Namespace's own name."""
    return name if kind == "Namespace" and api_version == "v1" else namespace


def _routing_prefilter(qs: QuerySet, host: str) -> QuerySet:
    """Narrow in the database to objects with a spec.hosts entry starting with the host's first
    label (the text of the JSON list is matched); `may_route_host` then decides exactly."""
    label = re.escape(host_label(host))
    return qs.filter(manifest__spec__hosts__iregex=rf'"\s*{label}(\.|\s*")')
