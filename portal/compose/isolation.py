"""The namespace and its guard rails: the Namespace, ResourceQuota, LimitRange, default-deny
NetworkPolicies (plus DNS egress) and the team's RoleBinding. No Django."""

from __future__ import annotations

from portal.compose.capacity import pool_annotations
from portal.compose.spec import L_WORKLOAD, EnvironmentSpec, metadata, namespaced


def namespace(spec: EnvironmentSpec) -> dict:
    """The environment's namespace, labelled for attribution and the workload class; with its own
    node pool, annotated so every pod created in it runs there (`capacity.pool_annotations`)."""
    meta = metadata(spec, spec.namespace)
    meta["labels"][L_WORKLOAD] = spec.workload_class
    meta["annotations"] = {"kiln.dev/ttl-hours": str(spec.ttl_hours), **pool_annotations(spec)}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def resource_quota(spec: EnvironmentSpec) -> dict:
    """Hard caps on CPU, memory and GPUs (GPUs are requests-only in Kubernetes quotas)."""
    return namespaced(
        spec,
        "v1",
        "ResourceQuota",
        "kiln-quota",
        spec={
            "hard": {
                "requests.cpu": str(spec.cpu),
                "limits.cpu": str(spec.cpu * 2),
                "requests.memory": f"{spec.memory_gib}Gi",
                "limits.memory": f"{spec.memory_gib}Gi",
                "requests.nvidia.com/gpu": str(spec.gpu),
                "pods": str(max(10, spec.cpu * 10)),
                "services.loadbalancers": "0",
            }
        },
    )


def limit_range(spec: EnvironmentSpec) -> dict:
    """Defaults for containers that set no requests or limits, and a per-container maximum."""
    return namespaced(
        spec,
        "v1",
        "LimitRange",
        "kiln-limits",
        spec={
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": "500m", "memory": "512Mi"},
                    "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
                    "max": {"cpu": str(spec.cpu), "memory": f"{spec.memory_gib}Gi"},
                }
            ]
        },
    )


def network_policies(spec: EnvironmentSpec) -> list[dict]:
    """Default deny for ingress and egress, plus DNS egress so workloads can resolve names."""
    deny = namespaced(
        spec,
        "networking.k8s.io/v1",
        "NetworkPolicy",
        "default-deny",
        spec={"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    )
    dns = namespaced(
        spec,
        "networking.k8s.io/v1",
        "NetworkPolicy",
        "allow-dns-egress",
        spec={
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                            },
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                }
            ],
        },
    )
    return [deny, dns]


def role_binding(spec: EnvironmentSpec) -> dict:
    """The team's group may edit (not administer) its namespace."""
    return namespaced(
        spec,
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "kiln-team-edit",
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        subjects=[
            {
                "kind": "Group",
                "apiGroup": "rbac.authorization.k8s.io",
                "name": spec.team_group or f"kiln:team:{spec.team}",
            }
        ],
    )
