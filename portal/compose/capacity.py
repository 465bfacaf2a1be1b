"""Capacity: the Karpenter NodePool an environment's workloads run on (spot pools diversified
over at least four instance types and three zones), expiring with the environment. No Django.

An environment with its own pool runs there and nowhere else, as the cluster enforces it:
its Namespace carries the PodNodeSelector and PodTolerationRestriction admission plugins'
annotations (`pool_annotations`), so every pod created in it is given the pool's node
selector and the toleration of the pool's taint; the pool's taint keeps every other pod off
its nodes; Kiln's extender filters both ways besides (`scheduler/pools.py`). A spot pool
also allows on-demand capacity, for the environment's latency-sensitive pods (never on
spot), Karpenter choosing spot wherever a pod may take it (it is cheaper).
"""

from __future__ import annotations

import hashlib
import json
import math

from portal.compose.spec import (
    L_ENV,
    L_TEAM,
    L_WORKLOAD,
    CompositionError,
    EnvironmentSpec,
    metadata,
)

MIN_SPOT_TYPES = 4
MIN_SPOT_ZONES = 3
# The pool may launch three times the quota's cpu and memory: pods requesting up to the quota,
# spread over two capacity pools at least and with latency-sensitive ones on an on-demand node
# beside the spot ones, need up to three nodes even when they fit in one (a 4-CPU environment's
# demo workload asks 2 CPUs and takes three 4-CPU nodes). The quota still caps what pods request,
# and Karpenter launches only for pending pods.
POOL_HEADROOM = 3
# The admission plugins' namespace annotations (PodNodeSelector, PodTolerationRestriction).
A_NODE_SELECTOR = "scheduler.alpha.kubernetes.io/node-selector"
A_DEFAULT_TOLERATIONS = "scheduler.alpha.kubernetes.io/defaultTolerations"
L_NODEPOOL = "karpenter.sh/nodepool"
DNS_LABEL_MAX = 63
PLAIN_POOL_NAMESPACE = 49  # a longer namespace's pool name ends in a hash (`pool_name`)


def has_own_pool(spec: EnvironmentSpec) -> bool:
    """Whether the environment gets a NodePool of its own (a spot pool, or GPUs)."""
    return spec.spot_node_pool or spec.gpu > 0


def pool_name(spec: EnvironmentSpec) -> str:
    """The name of the environment's own NodePool: `kiln-<namespace>`, at most 63 characters,
    for Karpenter puts it in a label (`karpenter.sh/nodepool`) on every node of the pool. A
    namespace over 49 characters keeps its start and ends in a hash of the whole of it."""
    if len(spec.namespace) <= PLAIN_POOL_NAMESPACE:
        return f"kiln-{spec.namespace}"
    # Always 63 characters, from a namespace longer than any plain name's (at most 54), so
    # no other namespace's plain name can be the same.
    digest = hashlib.sha256(spec.namespace.encode()).hexdigest()[:8]
    return f"kiln-{spec.namespace[: DNS_LABEL_MAX - 5 - 1 - len(digest)]}-{digest}"


def pool_taint(spec: EnvironmentSpec) -> dict:
    """The taint every node of the environment's pool carries (only its pods tolerate it)."""
    return {"key": L_ENV, "value": spec.namespace, "effect": "NoSchedule"}


def pool_annotations(spec: EnvironmentSpec) -> dict[str, str]:
    """Namespace annotations putting every pod of the environment on its own pool: the node
    selector of the pool and the toleration of its taint ({} without a pool of its own)."""
    if not has_own_pool(spec):
        return {}
    toleration = {**pool_taint(spec), "operator": "Equal"}
    return {
        A_NODE_SELECTOR: f"{L_NODEPOOL}={pool_name(spec)}",
        A_DEFAULT_TOLERATIONS: json.dumps([toleration], sort_keys=True, separators=(",", ":")),
    }


def pool_limits(spec: EnvironmentSpec, types: tuple[str, ...]) -> tuple[int, int]:
    """The pool's cpu and memory (GiB) limits: POOL_HEADROOM times the quota, and never less
    than POOL_HEADROOM nodes of the largest type it may launch. Karpenter counts whole nodes
    against the limits, so a small quota's limit below one node's size (2 CPUs and 4 GiB
    against 4-CPU, 16-GiB types) would let the pool launch nothing and leave every pod of
    the environment pending; the quota still caps what the pods request."""
    shapes = [spec.node_shapes[t] for t in types if t in spec.node_shapes]
    cpu = spec.cpu * POOL_HEADROOM
    memory_gib = spec.memory_gib * POOL_HEADROOM
    if shapes:
        cpu = max(cpu, math.ceil(max(s[0] for s in shapes) * POOL_HEADROOM))
        memory_gib = max(memory_gib, math.ceil(max(s[1] for s in shapes) * POOL_HEADROOM))
    return cpu, memory_gib


def node_pool(spec: EnvironmentSpec) -> dict:
    """A Karpenter NodePool that expires with the environment and has a disruption budget."""
    spot = spec.spot_node_pool
    if spec.gpu > 0:
        types = spec.gpu_instance_types
    elif spot:
        types = spec.spot_instance_types
    else:
        types = spec.on_demand_instance_types
    types = tuple(sorted(set(types)))
    zones = tuple(sorted(set(spec.zones)))
    if spot and (len(types) < MIN_SPOT_TYPES or len(zones) < MIN_SPOT_ZONES):
        raise CompositionError(
            f"a spot pool needs >= {MIN_SPOT_TYPES} instance types and >= {MIN_SPOT_ZONES} zones, "
            f"got {len(types)} and {len(zones)}"
        )
    cpu, memory_gib = pool_limits(spec, types)
    limits = {"cpu": str(cpu), "memory": f"{memory_gib}Gi"}
    if spec.gpu:
        limits["nvidia.com/gpu"] = str(spec.gpu)
    taints = [pool_taint(spec)]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": metadata(spec, pool_name(spec)),
        "spec": {
            "template": {
                "metadata": {
                    "labels": {
                        L_ENV: spec.namespace,
                        L_TEAM: spec.team,
                        L_WORKLOAD: spec.workload_class,
                    }
                },
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": spec.node_class,
                    },
                    "requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["spot", "on-demand"] if spot else ["on-demand"],
                        },
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": list(types),
                        },
                        {
                            "key": "topology.kubernetes.io/zone",
                            "operator": "In",
                            "values": list(zones),
                        },
                    ],
                    "taints": taints,
                    "expireAfter": f"{spec.ttl_hours}h",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "5m",
                "budgets": [{"nodes": "20%" if spot else "10%"}],
            },
            "limits": limits,
        },
    }
