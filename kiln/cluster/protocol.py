"""The `DeliveryBackend` protocol every cluster backend implements, and the cluster-side Lease.

Every method a backend offers is declared and documented here, with the types it takes and
returns (`kiln.cluster.base`). Backends subclass the protocol, so a signature callers use in
several forms (`list`, a Lease's `write`) is spelled once here and each backend implements the
one-value form behind it (`list_query`, `replace`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kiln.cluster.base import (
    AppliedRef,
    Health,
    PodBinding,
    is_deleting,
    may_route_host,
    secret_manifest,
)

if TYPE_CHECKING:
    from kiln.cluster.tree import ObjectState


@dataclass(frozen=True)
class LeaseTerms:
    """What a Lease says: its holder, how long a renewal holds, when it was taken and renewed,
    and how many times it changed hands (the fencing term)."""

    holder: str
    lease_duration: float
    acquire_time: datetime
    renew_time: datetime
    transitions: int


class LeaseMirror(Protocol):
    """A `coordination.k8s.io/v1` Lease beside a database lease, written with optimistic concurrency.

    A mirror subclasses this and implements `replace`; `write` is how callers name the terms.
    """

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
        """Create or replace the Lease if it still names `expected_holder`; returns the new
        resourceVersion, raises LeaseConflict."""
        terms = LeaseTerms(holder, lease_duration, acquire_time, renew_time, transitions)
        return self.replace(terms, expected_holder=expected_holder)

    def replace(self, terms: LeaseTerms, *, expected_holder: str | None) -> str:
        """`write`, with the terms in one value."""
        ...

    def holder(self) -> str:
        """Who the Lease names now ("" when there is none or it names no one)."""
        ...

    def delete(self, *, expected_holder: str | None = None) -> None:
        """Remove the Lease (idempotent); with `expected_holder`, only while it names that
        holder or no one (a Lease another holder wrote since is left alone)."""
        ...


@dataclass(frozen=True)
class ListQuery:
    """The arguments of one `DeliveryBackend.list` call, in one value."""

    api_version: str
    kind: str
    namespace: str | None = None
    label_selector: str | None = None
    include_deleting: bool = True
    routing_host: str | None = None

    def admits(self, obj: dict[str, Any]) -> bool:
        """True if a listed object passes the deletion and routed-host filters (the kind,
        namespace and label selector are the lister's to apply)."""
        if not self.include_deleting and is_deleting(obj):
            return False
        return self.routing_host is None or may_route_host(obj, self.routing_host)


@runtime_checkable
class DeliveryBackend(Protocol):
    """What every backend offers; each implements all of it (docs/cluster.md has the contract).

    A backend subclasses this, so the methods written here once (`list`) are its own.

    `name` is for people (logs, spans, step messages); no code decides anything by it.
    """

    name: str
    # True where Argo CD runs in the cluster and syncs the GitOps repository itself; False where
    # the gitops backend must apply each commit to this backend (the simulated cluster).
    syncs_gitops: bool
    # True where the cluster's traffic is simulated from its own objects (the faults in its
    # VirtualServices are what requests see), so a fault's effect can be read from the cluster.
    simulates_traffic: bool
    # True where no kube-scheduler or Karpenter runs and Kiln's simulated ones (scheduler/cluster/)
    # launch nodes and bind pods through this backend: the simulated cluster only.
    simulates_scheduling: bool

    def apply(self, manifests: list[dict], *, field_manager: str = "kiln") -> list[AppliedRef]:
        """Server-side apply in order; a manifest's metadata.resourceVersion is a precondition."""
        ...

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        """The live object, or None."""
        ...

    def delete(self, ref: AppliedRef) -> bool:
        """Ask for foreground deletion; False if it did not exist."""
        ...

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
        """Objects of one kind, by namespace and label selector, sorted by namespace then name.

        `include_deleting=False` leaves out objects with a deletionTimestamp;
        `routing_host` keeps only objects that `may_route_host` (a superset of
        those whose spec.hosts resolve to that host: callers match exactly).
        """
        return self.list_query(
            ListQuery(api_version, kind, namespace, label_selector, include_deleting, routing_host)
        )

    def list_query(self, query: ListQuery) -> list[dict]:
        """`list`, with its arguments in one value: what each backend implements."""
        ...

    def list_kinds(self, kinds: Sequence[tuple[str, str]], namespace: str) -> list[dict]:
        """The objects of each (apiVersion, kind) in one namespace, deleting ones included: kind by
        kind in the order given, each sorted by name, as `list` of each kind one after the other
        would answer (the simulated cluster reads them together)."""
        ...

    def health(self, ref: AppliedRef) -> Health:
        """Health of one object."""
        ...

    def health_many(self, refs: list[AppliedRef]) -> list[Health]:
        """Health of many objects, in order."""
        ...

    def describe(self, refs: list[AppliedRef]) -> list[ObjectState]:
        """Each object's health, sync state and recent events, in order (`kiln.cluster.tree`)."""
        ...

    def lock_namespace(self, *, namespace: str) -> AbstractContextManager[None]:
        """Hold writers of `namespace`'s objects off for a read-modify-write (a no-op where
        resourceVersion preconditions alone decide; a row lock on the simulated cluster)."""
        ...

    def carry_out_pod_kill(self, *, namespace: str, pods: list[str]) -> list[str]:
        """Do what a cluster's chaos controller does for an applied pod-kill; returns pods deleted here.

        A cluster running Chaos Mesh kills the pods itself (nothing is deleted
        here); the simulated cluster has no such controller and deletes them.
        """
        ...

    def lease_mirror(self, *, namespace: str, name: str) -> LeaseMirror | None:
        """The cluster-side Lease to keep beside a database lease, or None where there is none."""
        ...

    def update_status(self, updates: list[tuple[AppliedRef, dict[str, Any]]]) -> int:
        """Replace each object's status (the status subresource, as a controller writes it).

        Returns how many objects were written; an object that does not exist is skipped.
        """
        ...

    def bind_pods(self, bindings: list[PodBinding]) -> int:
        """Bind each pending pod to its node (`pods/binding`): nodeName, annotations, PodScheduled.

        Returns how many pods were bound; a pod that is gone or already bound is skipped.
        """
        ...

    def annotate(self, ref: AppliedRef, annotations: dict[str, str | None]) -> bool:
        """Merge `annotations` into a live object's metadata (None removes a key), as a JSON
        merge patch of `metadata.annotations` does; False if the object does not exist.

        Only the keys given change, so writers of other annotations are not overwritten. Like
        a binding, it is cluster state (a mark on a Node), never committed to a repository.
        """
        ...

    def scale(self, ref: AppliedRef, replicas: int) -> int | None:
        """Set a workload's replicas through its `scale` subresource (what `kubectl scale` does);
        returns the replicas it had before, or None if it does not exist.

        Only `spec.replicas` changes, so the team's own fields stay theirs; like a binding, it is
        cluster state, never committed to a repository.
        """
        ...

    def write_secret(
        self, *, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]
    ) -> AppliedRef:
        """Create or replace a v1 Secret straight in the live cluster, never in a repository
        (a credential is not desired state to commit); raises DeliveryError where there is none.

        A backend that applies to a live cluster applies it (this default); one that commits to a
        repository writes it elsewhere.
        """
        manifest = secret_manifest(namespace=namespace, name=name, data=data, labels=labels)
        return self.apply([manifest])[0]

    def tenant(self, *, namespace: str, name: str) -> DeliveryBackend | None:
        """The API server of the TenantControlPlane `namespace/name`, as a backend of its own
        (objects applied there live inside the tenant's cluster); None until it serves."""
        ...
