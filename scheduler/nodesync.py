"""Node sync: the configured cluster's Nodes and Pods into the inventory, and Workload Commitment.

`cluster_sync(backend=...)` reads every Node and Pod through the cluster interface
(`kiln/cluster`: simulated, kubernetes or gitops's observer alike), so the inventory
is the cluster the portal provisions into. `KubernetesNodeSource` is the list+watch
path of the kubernetes client, for a watcher that follows node events between
resyncs. Both produce `ObservedNode`s and hand them to `services.node_sync` /
`services.node_apply_event`, so the inventory is written in one place.
Requested resources are the sum of the effective requests of the node's
non-terminal pods (the same arithmetic the extender applies to a pod).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.utils.dateparse import parse_datetime

from kiln.cluster import DeliveryBackend
from kiln.identity.permissions import system_actor
from scheduler import commitment, pools, services
from scheduler.extender.protocol import GPU_RESOURCE, ProtocolError, parse_quantity, pod_request
from scheduler.models import NodeSource
from scheduler.services import ObservedNode

log = logging.getLogger("kiln.scheduler.nodesync")
ACTOR = "scheduler-node-sync"
TERMINAL_PHASES = commitment.TERMINAL_PHASES


def _quantity(value: Any, scale: int = 1) -> int:
    try:
        return int(parse_quantity(value if value is not None else "0") * scale)
    except ProtocolError:
        return 0


def observed_from_node(
    node: dict[str, Any],
    requested: dict[str, tuple[int, int, int]],
    workloads: dict[str, dict[str, list[int]]] | None = None,
) -> ObservedNode:
    """An ObservedNode from a v1.Node in API JSON form plus the per-node requested totals (and
    the per-node workload counts, `workloads_by_node`)."""
    metadata = node.get("metadata") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    name = metadata.get("name") or ""
    cpu, mem, gpu = requested.get(name, (0, 0, 0))
    created = metadata.get("creationTimestamp")
    return ObservedNode(
        name=name,
        labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
        allocatable_cpu_millis=_quantity(allocatable.get("cpu"), 1000),
        allocatable_memory_bytes=_quantity(allocatable.get("memory")),
        allocatable_gpus=_quantity(allocatable.get(GPU_RESOURCE)),
        requested_cpu_millis=cpu,
        requested_memory_bytes=mem,
        requested_gpus=gpu,
        launched_at=parse_datetime(created) if isinstance(created, str) else None,
        workloads=(workloads or {}).get(name, {}),
    )


def workloads_by_node(pods: list[dict[str, Any]]) -> dict[str, dict[str, list[int]]]:
    """Per node, per workload with pods bound there (`pools.workload_key`; DaemonSets left out):
    [its pods on the node, its replicas in the cluster (bound or pending, not finished)]."""
    replicas: dict[str, int] = {}
    bound: dict[str, dict[str, int]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        who = pools.pod_placement(pod)
        if not who.workload or who.daemon:
            continue
        replicas[who.workload] = replicas.get(who.workload, 0) + 1
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            on_node = bound.setdefault(node, {})
            on_node[who.workload] = on_node.get(who.workload, 0) + 1
    return {
        node: {w: [n, replicas[w]] for w, n in sorted(counts.items())}
        for node, counts in bound.items()
    }


def requested_by_node(pods: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """Sum of pod requests (millicores, bytes, GPUs) per node over bound, non-terminal pods."""
    totals: dict[str, tuple[int, int, int]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        try:
            req = pod_request(pod)
        except ProtocolError:
            log.warning("skipping pod with malformed requests", extra={"node": node})
            continue
        cpu, mem, gpu = totals.get(node, (0, 0, 0))
        totals[node] = (cpu + int(req.cpu * 1000), mem + int(req.memory), gpu + int(req.gpu))
    return totals


class KubernetesNodeSource:
    """Lists and watches nodes (and lists pods for requests) through a `kubernetes.client.ApiClient`."""

    def __init__(self, api_client: Any) -> None:
        # The client library is loaded here, by a process that watches a cluster, not by every
        # process that imports the scheduler app (its admin does, through cluster_reads).
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.resource_version: str | None = None

    def _pods(self) -> list[dict[str, Any]]:
        pods = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
        return [self.api_client.sanitize_for_serialization(p) for p in pods.items]

    def sync(self) -> services.SyncResult:
        """Full resync: list nodes and pods, make the inventory match."""
        listed = self.core.list_node()
        self.resource_version = listed.metadata.resource_version
        pods = self._pods()
        requested = requested_by_node(pods)
        workloads = workloads_by_node(pods)
        observed = [
            observed_from_node(self.api_client.sanitize_for_serialization(n), requested, workloads)
            for n in listed.items
        ]
        return services.node_sync(
            actor=system_actor(ACTOR), source=NodeSource.CLUSTER, observed=observed
        )

    def watch(self, *, timeout_seconds: int = 300, stop: threading.Event | None = None) -> int:
        """Apply node watch events from the last resourceVersion until the server ends the stream."""
        applied = 0
        pods = self._pods()
        requested = requested_by_node(pods)
        workloads = workloads_by_node(pods)
        from kubernetes import watch as kube_watch

        watcher = kube_watch.Watch()
        kwargs: dict[str, Any] = {"timeout_seconds": timeout_seconds}
        if self.resource_version:
            kwargs["resource_version"] = self.resource_version
        for event in watcher.stream(self.core.list_node, **kwargs):
            if stop is not None and stop.is_set():
                watcher.stop()
                break
            obj = event["raw_object"]
            self.resource_version = (obj.get("metadata") or {}).get(
                "resourceVersion", self.resource_version
            )
            services.node_apply_event(
                actor=system_actor(ACTOR),
                source=NodeSource.CLUSTER,
                event=event["type"],
                node=observed_from_node(obj, requested, workloads),
            )
            applied += 1
        return applied


def owner_kind(pod: dict[str, Any]) -> str:
    """The kind of the pod's controlling owner (ownerReferences with controller: true, else the
    first), or "" for a bare pod."""
    refs = [
        r for r in (pod.get("metadata") or {}).get("ownerReferences") or [] if isinstance(r, dict)
    ]
    controller = next((r for r in refs if r.get("controller")), refs[0] if refs else {})
    return str(controller.get("kind") or "")


def pod_demand(pod: dict[str, Any]) -> commitment.PodDemand | None:
    """A pod as Workload Commitment counts it (millicores, bytes, GPUs); None if its requests
    cannot be read (logged, counted nowhere)."""
    try:
        req = pod_request(pod)
    except ProtocolError:
        log.warning("skipping pod with malformed requests")
        return None
    return commitment.PodDemand(
        node=(pod.get("spec") or {}).get("nodeName") or None,
        cpu=float(int(req.cpu * 1000)),
        memory=float(int(req.memory)),
        gpu=float(int(req.gpu)),
        daemonset=owner_kind(pod) == "DaemonSet",
        terminal=(pod.get("status") or {}).get("phase") in TERMINAL_PHASES,
    )


def commitment_of(
    nodes: list[dict[str, Any]], pods: Iterable[dict[str, Any]]
) -> commitment.Commitment:
    """Workload Commitment of v1 Node and Pod objects as the cluster returns them."""
    shapes = [observed_from_node(n, {}) for n in nodes]
    demands = [d for d in (pod_demand(p) for p in pods) if d is not None]
    return commitment.from_pods(
        [
            (o.name, (o.allocatable_cpu_millis, o.allocatable_memory_bytes, o.allocatable_gpus))
            for o in shapes
        ],
        demands,
    )


@dataclass(frozen=True)
class ClusterSync:
    """What one sync from the cluster did: the inventory's changes and the commitment it saw."""

    result: services.SyncResult
    commitment: commitment.Commitment


def cluster_sync(*, backend: DeliveryBackend) -> ClusterSync:
    """Make the inventory match the cluster's Nodes (with their pods' requests), record node
    launches and removals, and store a Workload Commitment sample if it moved."""
    actor = system_actor(ACTOR)
    # A node being deleted is cordoned and draining: it takes no pods and leaves the inventory.
    nodes = backend.list("v1", "Node", include_deleting=False)
    pods = backend.list("v1", "Pod")
    requested = requested_by_node(pods)
    workloads = workloads_by_node(pods)
    observed = [observed_from_node(n, requested, workloads) for n in nodes]
    result = services.node_sync(actor=actor, source=NodeSource.CLUSTER, observed=observed)
    figures = commitment_of(nodes, pods)
    services.commitment_sample_store(actor=actor, figures=figures, nodes=len(nodes))
    return ClusterSync(result, figures)
