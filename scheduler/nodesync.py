"""Node sources: a Kubernetes list+watch through the `kubernetes` client, and the simulated cluster.

Both produce `ObservedNode`s and hand them to `services.node_sync` /
`services.node_apply_event`, so the inventory is written in one place.
Requested resources are the sum of the effective requests of the node's
non-terminal pods (the same arithmetic the extender applies to a pod).
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

from kubernetes import client, watch

from kiln.identity.permissions import system_actor
from scheduler import services
from scheduler.extender.protocol import GPU_RESOURCE, ProtocolError, parse_quantity, pod_request
from scheduler.models import NodeSource
from scheduler.services import ObservedNode

log = logging.getLogger("kiln.scheduler.nodesync")
ACTOR = "scheduler-node-sync"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _quantity(value: Any, scale: int = 1) -> int:
    try:
        return int(parse_quantity(value if value is not None else "0") * scale)
    except ProtocolError:
        return 0


def observed_from_node(
    node: dict[str, Any], requested: dict[str, tuple[int, int, int]]
) -> ObservedNode:
    """An ObservedNode from a v1.Node in API JSON form plus the per-node requested totals."""
    metadata = node.get("metadata") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    name = metadata.get("name") or ""
    cpu, mem, gpu = requested.get(name, (0, 0, 0))
    return ObservedNode(
        name=name,
        labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
        allocatable_cpu_millis=_quantity(allocatable.get("cpu"), 1000),
        allocatable_memory_bytes=_quantity(allocatable.get("memory")),
        allocatable_gpus=_quantity(allocatable.get(GPU_RESOURCE)),
        requested_cpu_millis=cpu,
        requested_memory_bytes=mem,
        requested_gpus=gpu,
    )


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
        requested = requested_by_node(self._pods())
        observed = [
            observed_from_node(self.api_client.sanitize_for_serialization(n), requested)
            for n in listed.items
        ]
        return services.node_sync(
            actor=system_actor(ACTOR), source=NodeSource.KUBERNETES, observed=observed
        )

    def watch(self, *, timeout_seconds: int = 300, stop: threading.Event | None = None) -> int:
        """Apply node watch events from the last resourceVersion until the server ends the stream."""
        applied = 0
        requested = requested_by_node(self._pods())
        watcher = watch.Watch()
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
                source=NodeSource.KUBERNETES,
                event=event["type"],
                node=observed_from_node(obj, requested),
            )
            applied += 1
        return applied


# The simulated cluster's node pools: (name prefix, instance type, capacity type, zones, count).
SIMULATED_POOLS = (
    ("general", "m6i.xlarge", "on-demand", ("us-east-1a", "us-east-1b", "us-east-1c"), 3),
    ("general-spot", "m6a.xlarge", "spot", ("us-east-1a", "us-east-1b"), 2),
    ("batch-spot", "c6i.2xlarge", "spot", ("us-east-1b", "us-east-1c"), 2),
    ("memory", "r6i.large", "on-demand", ("us-east-1a",), 1),
    ("gpu", "g5.xlarge", "on-demand", ("us-east-1a",), 1),
)
SIMULATED_SHAPES = {
    "m6i.xlarge": (3920, 14_500_000_000, 0),
    "m6a.xlarge": (3920, 14_500_000_000, 0),
    "c6i.2xlarge": (7910, 13_800_000_000, 0),
    "r6i.large": (1930, 14_900_000_000, 0),
    "g5.xlarge": (3920, 14_500_000_000, 1),
}


def simulated_nodes(tick: int = 0, seed: int = 7) -> list[ObservedNode]:
    """The simulated cluster's nodes at a tick: fixed pools, requests drifting every 20 ticks."""
    rng = random.Random(seed * 100_003 + tick // 20)
    nodes: list[ObservedNode] = []
    for prefix, itype, capacity, zones, count in SIMULATED_POOLS:
        cpu, mem, gpus = SIMULATED_SHAPES[itype]
        for i in range(count):
            zone = zones[i % len(zones)]
            used = rng.uniform(0.15, 0.85)
            nodes.append(
                ObservedNode(
                    name=f"sim-{prefix}-{i}",
                    labels={
                        "karpenter.sh/capacity-type": capacity,
                        "node.kubernetes.io/instance-type": itype,
                        "topology.kubernetes.io/zone": zone,
                        "kubernetes.io/os": "linux",
                    },
                    allocatable_cpu_millis=cpu,
                    allocatable_memory_bytes=mem,
                    allocatable_gpus=gpus,
                    requested_cpu_millis=int(cpu * used),
                    requested_memory_bytes=int(mem * used * rng.uniform(0.7, 1.1)),
                    requested_gpus=0,
                )
            )
    return nodes


def simulated_sync(tick: int = 0) -> services.SyncResult:
    """Sync the inventory from the simulated cluster at a tick."""
    return services.node_sync(
        actor=system_actor(ACTOR), source=NodeSource.SIMULATED, observed=simulated_nodes(tick)
    )
