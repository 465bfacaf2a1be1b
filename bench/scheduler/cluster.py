"""`cluster_bench`: 1,000 nodes and 10,000 pending pods in the simulated cluster, all bound through the extender.

Setup (not timed): a cluster of N nodes over the price book's non-GPU types and
its zones, half spot, and M pending pods in one namespace, a third each
latency-sensitive, standard and batch, asking 100m-500m and 128-512 MiB. The
seed picks shapes and classes. Timed: the simulated kube-scheduler's passes
(default filters, then the extender's filter and prioritize, bindings written
`BIND_BATCH` at a time) until no pod is left that another pass could bind (none
bound, or none left Pending). A pod's bind latency runs from the start of its
scheduling cycle to the commit of the batch holding its binding.

The extender is reached as kube-scheduler reaches it, over HTTP (`--transport
http`, the default): `ExtenderASGI` under uvicorn with the extender's one-write
protocol on a loopback port (`transport.served_extender`), answering from the
pass's snapshot as the in-process call does. `--transport in-process` calls
`extender_call` directly (what the standalone cluster tick does), to show what
the HTTP hop costs.

Workload Commitment at the end is `scheduler.commitment`'s full figure (ratio,
pending, stranded capacity and spread over nodes, per resource), computed as the
node sync computes it (`nodesync.commitment_of`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from django.db import transaction

from kiln.cluster import AppliedRef, DeliveryBackend
from kiln.cluster.models import SimulatedObject
from kiln.cluster.nodes import node_manifest, node_status, pod_node
from scheduler import scoring
from scheduler.models import InstanceType
from scheduler.nodesync import commitment_of
from scheduler.pools import L_SPREAD_GROUP
from scheduler.simulation.kubescheduler import KubeScheduler
from scheduler.simulation.transport import Transport, served_extender

NAMESPACE = "cluster-bench"
POOL = "cluster-bench"
CLASSES = (scoring.LATENCY_SENSITIVE, scoring.STANDARD, scoring.BATCH)
CPU = ("100m", "250m", "500m")
MEMORY = ("128Mi", "256Mi", "512Mi")
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
GIB = 2**30
HTTP, IN_PROCESS = "http", "in-process"


def bench_reset() -> None:
    """Remove every object an earlier run left (its nodes, namespace and pods)."""
    with transaction.atomic():
        SimulatedObject.objects.filter(namespace=NAMESPACE).delete()
        SimulatedObject.objects.filter(
            kind="Node", labels__contains={"karpenter.sh/nodepool": POOL}
        ).delete()
        SimulatedObject.objects.filter(kind="Namespace", name=NAMESPACE).delete()


def bench_cluster(
    *, backend: DeliveryBackend, nodes: int, pods: int, seed: int, spread_group_size: int = 0
) -> None:
    """Create the bench's nodes (with status) and pending pods; with `spread_group_size`, the
    pods of each class form workloads of that many replicas (`kiln.dev/spread-group`)."""
    rng = random.Random(seed)
    types = list(InstanceType.objects.filter(gpus=0).order_by("name"))
    manifests, statuses = [], []
    for i in range(nodes):
        itype = rng.choice(types)
        name = f"bench-node-{i:05d}"
        manifests.append(
            node_manifest(
                name=name,
                instance_type=itype.name,
                zone=rng.choice(ZONES),
                capacity_type="spot" if i % 2 else "on-demand",
                nodepool=POOL,
            )
        )
        statuses.append(
            (
                AppliedRef("v1", "Node", "", name),
                node_status(cpu=float(itype.vcpu), memory=int(itype.memory_gib * GIB), gpu=0),
            )
        )
    for start in range(0, nodes, 500):
        backend.apply(manifests[start : start + 500], field_manager="cluster-bench")
    backend.update_status(statuses)
    backend.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    pod_manifests = []
    for i in range(pods):
        cls = CLASSES[i % 3]
        pod_manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"bench-pod-{i:05d}",
                    "namespace": NAMESPACE,
                    "labels": {
                        "app": f"bench-{cls}",
                        scoring.WORKLOAD_CLASS_LABEL: cls,
                        **(
                            {L_SPREAD_GROUP: f"{cls}-{i // (3 * spread_group_size)}"}
                            if spread_group_size
                            else {}
                        ),
                    },
                },
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "resources": {
                                "requests": {"cpu": rng.choice(CPU), "memory": rng.choice(MEMORY)}
                            },
                        }
                    ]
                },
            }
        )
    for start in range(0, pods, 500):
        backend.apply(pod_manifests[start : start + 500], field_manager="cluster-bench")


def commitment(backend: DeliveryBackend) -> dict[str, Any]:
    """Workload Commitment (`scheduler.commitment`, as the node sync computes it) of the bench's nodes."""
    nodes = backend.list(
        "v1", "Node", None, f"karpenter.sh/nodepool={POOL}", include_deleting=False
    )
    pods = backend.list("v1", "Pod", NAMESPACE, include_deleting=False)
    figure = commitment_of(nodes, pods).as_dict(per_node=False)
    return {
        "definition": "scheduler.commitment: committed requests of bound, non-terminal pods "
        "/ allocatable, per resource (millicores, bytes, GPUs)",
        **figure,
    }


@contextmanager
def _extender(
    transport: str, port: int, current: list[KubeScheduler]
) -> Iterator[Transport | None]:
    """The transport the scheduler reaches the extender by: HTTP to the served app, or none
    (in process). The served app answers from the snapshot of the scheduler in `current`."""
    if transport == IN_PROCESS:
        yield None
        return
    with served_extender(lambda: current[0].current_snapshot(), port=port) as client:
        yield client


def bench_run(
    *,
    backend: DeliveryBackend,
    node_cache_capable: bool,
    transport: str = HTTP,
    port: int = 0,
    max_passes: int = 5,
    pool_rules: bool = True,
) -> dict[str, Any]:
    """Time kube-scheduler passes until no pod is left that another pass could bind."""
    current: list[KubeScheduler] = []
    with _extender(transport, port, current) as client:
        warm = KubeScheduler(
            backend=backend,
            node_cache_capable=node_cache_capable,
            transport=client,
            pool_rules=pool_rules,
        )
        current.append(warm)
        _warm_up(warm, backend)
        scheduler = KubeScheduler(
            backend=backend,
            node_cache_capable=node_cache_capable,
            transport=client,
            pool_rules=pool_rules,
        )
        current[0] = scheduler
        latencies: list[float] = []
        bound = 0
        passes = 0
        started = time.perf_counter()
        for _ in range(max_passes):
            passes += 1
            result = scheduler.run()
            latencies.extend(result.latencies)
            bound += len(result.bound)
            # Nothing bound, or nothing left Pending: another pass would bind nothing.
            if not result.bound or not result.unschedulable:
                break
        wall = time.perf_counter() - started
    lat = np.array(latencies) * 1000.0 if latencies else np.zeros(1)
    from_spot = _latency_sensitive_on_spot(backend)
    return {
        "bound": bound,
        "passes": passes,
        "wall_seconds": round(wall, 3),
        "pods_per_second": round(bound / wall, 1) if wall else None,
        "bind_latency_ms": {
            "p50": round(float(np.percentile(lat, 50)), 2),
            "p99": round(float(np.percentile(lat, 99)), 2),
        },
        "latency_sensitive_on_spot": len(from_spot),
    }


def _warm_up(scheduler: KubeScheduler, backend: DeliveryBackend) -> None:
    """Place one pod in memory (nothing written), so the compiled kernel is loaded and the
    connection open before timing."""
    nodes = backend.list("v1", "Node", None, f"karpenter.sh/nodepool={POOL}")[:10]
    pod = backend.list("v1", "Pod", NAMESPACE)[:1]
    for _ in scheduler.placements(nodes, pod):
        pass


def _latency_sensitive_on_spot(backend: DeliveryBackend) -> list[str]:
    spot = {
        n["metadata"]["name"]
        for n in backend.list("v1", "Node", None, "karpenter.sh/capacity-type=spot")
    }
    return [
        p["metadata"]["name"]
        for p in backend.list("v1", "Pod", NAMESPACE)
        if pod_node(p) in spot
        and scoring.workload_class_of(p["metadata"].get("labels")) == scoring.LATENCY_SENSITIVE
    ]


__all__ = ["HTTP", "IN_PROCESS", "bench_cluster", "bench_reset", "bench_run", "commitment"]
