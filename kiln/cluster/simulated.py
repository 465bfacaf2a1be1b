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

It is the one class that implements the whole backend protocol; the parts that stand alone
live beside it: applying a batch and the other row writes (`simulated_write`,
`simulated_scale`, `simulated_bulk`), deletion and the lazy finalizer controller
(`simulated_delete`), finding rows by reference (`simulated_rows`), rendering
(`simulated_render`), delays and failures (`simulated_failures`), tenant clusters
(`simulated_tenant`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from kiln.cluster import simulated_bulk
from kiln.cluster.base import (
    AppliedRef,
    DeliveryError,
    Health,
    PodBinding,
    desired_state,
    health_of,
    host_label,
    match_labels,
    parse_label_selector,
    precondition_of,
    ref_of,
)
from kiln.cluster.models import SimulatedFailure, SimulatedObject
from kiln.cluster.protocol import DeliveryBackend, LeaseMirror, ListQuery
from kiln.cluster.simulated_delete import mark_deleting, reconcile
from kiln.cluster.simulated_failures import (
    active_failures,
    consume,
    failures_for,
)
from kiln.cluster.simulated_render import render
from kiln.cluster.simulated_rows import any_of, ref_lookup
from kiln.cluster.simulated_scale import scale_one
from kiln.cluster.simulated_tenant import TCP, TenantAuditWebhook, tenant_cluster
from kiln.cluster.simulated_write import Batch, annotate_one, apply_batch
from kiln.cluster.tree import ObjectState, state_of


class SimulatedBackend(DeliveryBackend):
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
                    out = apply_batch(
                        self._objects(),
                        cluster=self.cluster,
                        batch=batch,
                        field_manager=field_manager,
                    )
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

    def delete(self, ref: AppliedRef) -> bool:
        """Mark the object deleting; it disappears once its finalizers clear.

        A Namespace takes its contents with it: they are marked deleting together, with one
        write, and each deletion is audited as the namespace controller's would be.
        """
        existed = mark_deleting(self._objects(), ref, audit=self.audit)
        if existed:
            self._reconcile(_scope(ref.api_version, ref.kind, ref.namespace, ref.name))
        if self.audit is not None:  # audited after the request completes, 404 included
            self.audit.record("delete", [(ref, 200 if existed else 404)])
        return existed

    def set_status(self, ref: AppliedRef, status: dict[str, Any]) -> None:
        """Write an object's status (what a controller would report); merged over the derived one."""
        updated = (
            self._objects()
            .filter(**ref_lookup(ref))
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
        self._objects().filter(**ref_lookup(ref)).update(
            finalizers=[], finalizers_clear_at=timezone.now()
        )
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

    def list_query(self, query: ListQuery) -> list[dict]:
        """Objects of one kind, by namespace, label selector, deletion and routed host."""
        namespace, label_selector = query.namespace, query.label_selector
        qs = self._objects().filter(api_version=query.api_version, kind=query.kind)
        if query.include_deleting:
            # Only the listed namespace's deleting objects can be in the answer.
            self._reconcile(namespace)
        else:
            # A reconcile only removes deleting objects, which this read leaves out anyway:
            # skipping it spares a scan of every deleting object in the cluster.
            qs = qs.filter(deletion_timestamp__isnull=True)
        if namespace is not None:
            qs = qs.filter(namespace=namespace)
        if query.routing_host is not None:
            qs = _routing_prefilter(qs, query.routing_host)
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
        return [o for o in rendered if query.admits(o)]

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
        found = {
            (o.api_version, o.kind, o.namespace, o.name): o
            for o in self._objects().filter(any_of(refs))
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
        """Remove deleting objects whose finalizers have cleared (`simulated_delete.reconcile`)."""
        reconcile(self._objects(), self.deleting_due(timezone.now()), namespace)


def _scope(api_version: str, kind: str, namespace: str, name: str) -> str:
    """The namespace whose reconcile can remove this object: a Namespace's own name."""
    return name if kind == "Namespace" and api_version == "v1" else namespace


def _routing_prefilter(qs: QuerySet, host: str) -> QuerySet:
    """Narrow in the database to objects with a spec.hosts entry starting with the host's first
    label (the text of the JSON list is matched); `may_route_host` then decides exactly."""
    label = re.escape(host_label(host))
    return qs.filter(manifest__spec__hosts__iregex=rf'"\s*{label}(\.|\s*")')
