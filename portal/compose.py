"""Composition: a pure function from an approved environment request to Kubernetes manifests.

No Django here. `compose(spec)` returns the manifests in apply order:
Namespace, ResourceQuota, LimitRange, default-deny NetworkPolicy (plus DNS
egress), RoleBinding for the team's group, and on request a Kamaji
TenantControlPlane, a Karpenter NodePool (spot pools diversified over at least
four instance types and three zones), a Crossplane database claim; last the
Argo CD Application that syncs the team's workloads into the namespace.
Every object carries the team, class, TTL class and request labels, so
anything left behind stays attributable.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MANAGED_BY = "app.kubernetes.io/managed-by"
L_TEAM = "kiln.dev/team"
L_CLASS = "kiln.dev/env-class"
L_TTL = "kiln.dev/ttl-class"
L_REQUEST = "kiln.dev/request-id"
L_ENV = "kiln.dev/environment"
L_WORKLOAD = "kiln.dev/workload-class"
L_POOL = "kiln.dev/datastore-pool"

DEFAULT_SPOT_TYPES = ("m6i.xlarge", "m6a.xlarge", "m5.xlarge", "m7i.xlarge", "c6i.2xlarge")
DEFAULT_ON_DEMAND_TYPES = ("m6i.xlarge", "m6i.2xlarge", "m7i.xlarge")
DEFAULT_GPU_TYPES = ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")
DEFAULT_ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
MIN_SPOT_TYPES = 4
MIN_SPOT_ZONES = 3
ARGOCD_NAMESPACE = "argocd"
KUBERNETES_VERSION = "v1.33.0"


class CompositionError(ValueError):
    """The request cannot be composed (e.g. too few instance types for a spot pool)."""


class PoolsExhausted(CompositionError):
    """Every datastore pool is at its hard cap."""


@dataclass(frozen=True)
class DatastorePool:
    """A Kamaji DataStore that tenant control planes share, with a spread label and a hard cap."""

    name: str
    label: str
    cap: int


@dataclass(frozen=True)
class EnvironmentSpec:
    """Everything composition needs; built from an approved request by the portal."""

    request_id: str
    team: str
    name: str
    namespace: str
    env_class: str
    ttl_hours: int
    workload_class: str
    cpu: int
    memory_gib: int
    gpu: int = 0
    tenant_control_plane: bool = False
    spot_node_pool: bool = False
    database: bool = False
    team_group: str = ""
    datastore: str = ""
    gitops_repo_url: str = "file:///var/lib/kiln/gitops.git"
    gitops_path_prefix: str = "environments"
    spot_instance_types: tuple[str, ...] = DEFAULT_SPOT_TYPES
    on_demand_instance_types: tuple[str, ...] = DEFAULT_ON_DEMAND_TYPES
    gpu_instance_types: tuple[str, ...] = DEFAULT_GPU_TYPES
    zones: tuple[str, ...] = DEFAULT_ZONES
    node_class: str = "default"
    extra_labels: Mapping[str, str] = field(default_factory=dict)


def ttl_class(ttl_hours: int) -> str:
    """Bucket a TTL for labels: day (<=24h), week (<=7d), month (<=30d), long."""
    if ttl_hours <= 24:
        return "day"
    if ttl_hours <= 24 * 7:
        return "week"
    if ttl_hours <= 24 * 30:
        return "month"
    return "long"


def choose_datastore(pools: Sequence[DatastorePool], tenants: Mapping[str, int]) -> DatastorePool:
    """Pick the pool for a new tenant: spread across labels, then fewest tenants, never past a cap.

    Among pools below their cap, the label with the fewest tenants in total wins
    (ties by label), then the pool with the fewest tenants in it (ties by name).
    """
    open_pools = [p for p in pools if tenants.get(p.name, 0) < p.cap]
    if not open_pools:
        raise PoolsExhausted(f"all {len(pools)} datastore pools are at their cap")
    per_label: dict[str, int] = {}
    for pool in pools:
        per_label[pool.label] = per_label.get(pool.label, 0) + tenants.get(pool.name, 0)
    return min(
        open_pools, key=lambda p: (per_label[p.label], p.label, tenants.get(p.name, 0), p.name)
    )


def labels(spec: EnvironmentSpec) -> dict[str, str]:
    """The labels every composed object carries."""
    base = {
        MANAGED_BY: "kiln",
        L_TEAM: spec.team,
        L_CLASS: spec.env_class,
        L_TTL: ttl_class(spec.ttl_hours),
        L_REQUEST: spec.request_id,
        L_ENV: spec.namespace,
    }
    base.update(spec.extra_labels)
    return base


def _meta(spec: EnvironmentSpec, name: str, namespace: str | None = None, **extra: Any) -> dict:
    meta: dict[str, Any] = {"name": name, "labels": labels(spec)}
    if namespace:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta


def namespace(spec: EnvironmentSpec) -> dict:
    """The environment's namespace, labelled for attribution and the workload class."""
    meta = _meta(spec, spec.namespace)
    meta["labels"][L_WORKLOAD] = spec.workload_class
    meta["annotations"] = {"kiln.dev/ttl-hours": str(spec.ttl_hours)}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def resource_quota(spec: EnvironmentSpec) -> dict:
    """Hard caps on CPU, memory and GPUs (GPUs are requests-only in Kubernetes quotas)."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(spec, "kiln-quota", spec.namespace),
        "spec": {
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
    }


def limit_range(spec: EnvironmentSpec) -> dict:
    """Defaults for containers that set no requests or limits, and a per-container maximum."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta(spec, "kiln-limits", spec.namespace),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": "500m", "memory": "512Mi"},
                    "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
                    "max": {"cpu": str(spec.cpu), "memory": f"{spec.memory_gib}Gi"},
                }
            ]
        },
    }


def network_policies(spec: EnvironmentSpec) -> list[dict]:
    """Default deny for ingress and egress, plus DNS egress so workloads can resolve names."""
    deny = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(spec, "default-deny", spec.namespace),
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }
    dns = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(spec, "allow-dns-egress", spec.namespace),
        "spec": {
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
    }
    return [deny, dns]


def role_binding(spec: EnvironmentSpec) -> dict:
    """The team's group may edit (not administer) its namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(spec, "kiln-team-edit", spec.namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [
            {
                "kind": "Group",
                "apiGroup": "rbac.authorization.k8s.io",
                "name": spec.team_group or f"kiln:team:{spec.team}",
            }
        ],
    }


def tenant_control_plane(spec: EnvironmentSpec) -> dict:
    """A Kamaji tenant control plane on the chosen datastore pool."""
    if not spec.datastore:
        raise CompositionError("a tenant control plane needs a datastore pool")
    meta = _meta(spec, spec.namespace, spec.namespace)
    meta["labels"][L_POOL] = spec.datastore
    return {
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "TenantControlPlane",
        "metadata": meta,
        "spec": {
            "dataStore": spec.datastore,
            "controlPlane": {
                "deployment": {"replicas": 3 if spec.env_class in ("staging", "prod") else 2},
                "service": {"serviceType": "ClusterIP"},
            },
            "kubernetes": {"version": KUBERNETES_VERSION, "kubelet": {"cgroupfs": "systemd"}},
            "networkProfile": {"port": 6443},
            "addons": {"coreDNS": {}, "kubeProxy": {}},
        },
    }


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
        "metadata": _meta(spec, f"kiln-{spec.namespace}"),
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


def database_claim(spec: EnvironmentSpec) -> dict:
    """A Crossplane claim for a PostgreSQL database (XRD and Composition in deploy/crossplane/)."""
    size = {"ephemeral": "small", "dev": "small", "staging": "medium", "prod": "large"}[
        spec.env_class
    ]
    return {
        "apiVersion": "database.kiln.dev/v1alpha1",
        "kind": "PostgreSQLInstance",
        "metadata": _meta(spec, f"{spec.name}-db", spec.namespace),
        "spec": {
            "parameters": {
                "size": size,
                "storageGB": {"small": 20, "medium": 100, "large": 500}[size],
                "version": "16",
                "highAvailability": spec.env_class == "prod",
            },
            "compositionSelector": {"matchLabels": {"kiln.dev/provider": "aws"}},
            "writeConnectionSecretToRef": {"name": f"{spec.name}-db-connection"},
        },
    }


def argocd_application(spec: EnvironmentSpec) -> dict:
    """The Argo CD Application that syncs the team's workloads into the namespace."""
    meta = _meta(spec, spec.namespace, ARGOCD_NAMESPACE)
    meta["finalizers"] = ["resources-finalizer.argocd.argoproj.io"]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": meta,
        "spec": {
            "project": "default",
            "source": {
                "repoURL": spec.gitops_repo_url,
                "targetRevision": "HEAD",
                "path": f"{spec.gitops_path_prefix}/{spec.namespace}/workloads",
            },
            "destination": {
                "server": "https://kubernetes.default.svc",
                "namespace": spec.namespace,
            },
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "syncOptions": ["ServerSideApply=true", "CreateNamespace=false"],
            },
        },
    }


def compose(spec: EnvironmentSpec) -> list[dict]:
    """All manifests for one environment, in apply order (namespace first, Application last)."""
    manifests = [namespace(spec), resource_quota(spec), limit_range(spec)]
    manifests += network_policies(spec)
    manifests.append(role_binding(spec))
    if spec.tenant_control_plane:
        manifests.append(tenant_control_plane(spec))
    if spec.spot_node_pool or spec.gpu > 0:
        manifests.append(node_pool(spec))
    if spec.database:
        manifests.append(database_claim(spec))
    manifests.append(argocd_application(spec))
    return manifests


# Kinds removed first in teardown (they run or own workloads), before the control plane and namespace.
WORKLOAD_KINDS = ("Application", "PostgreSQLInstance", "NodePool")
CONTROL_PLANE_KINDS = ("TenantControlPlane",)
WORKLOAD_RESOURCES = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("batch/v1", "Job"),
    ("v1", "Pod"),
)


def cordon(manifests: Sequence[dict]) -> list[dict]:
    """The manifests that stop new work: NodePool limits to zero, quota to zero pods."""
    out: list[dict] = []
    for manifest in manifests:
        if manifest["kind"] == "NodePool":
            pool = _copy(manifest)
            pool["spec"]["limits"] = {"cpu": "0", "memory": "0Gi"}
            out.append(pool)
        elif manifest["kind"] == "ResourceQuota":
            quota = _copy(manifest)
            quota["spec"]["hard"]["pods"] = "0"
            out.append(quota)
    return out


def _copy(value: Any) -> Any:
    return copy.deepcopy(value)
