"""Capacity: the Karpenter NodePool an environment's workloads run on (spot pools diversified
over at least four instance types and three zones), expiring with the environment. No Django."""

from __future__ import annotations

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
    limits = {"cpu": str(spec.cpu), "memory": f"{spec.memory_gib}Gi"}
    if spec.gpu:
        limits["nvidia.com/gpu"] = str(spec.gpu)
    taints = [{"key": L_ENV, "value": spec.namespace, "effect": "NoSchedule"}]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": metadata(spec, f"kiln-{spec.namespace}"),
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
                            "values": ["spot" if spot else "on-demand"],
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
