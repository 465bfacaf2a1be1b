"""The standalone demo's cluster: shared NodePools, tenant control planes' pods, each environment's workload.

- `kiln-general`: on-demand capacity for any environment's latency-sensitive pods
  (an environment's spot pool cannot take them);
- `kiln-management`: the management cluster's pool (tainted), which holds every
  Kamaji TenantControlPlane's control-plane pods (a Deployment per control plane
  in `kiln-management`, as Kamaji runs them, with the replicas the control plane asks for: none
  while its environment sleeps);
- `kube-system/kiln-node-agent`: a DaemonSet (a node agent asking 50m and 64 MiB,
  tolerating every taint) with one pod on every node, counted in each node's
  requests and left out of Workload Commitment's numerator;
- each new environment namespace gets a small demo workload, one latency-sensitive
  and one batch Deployment, unless `KILN_SIM_DEMO_WORKLOAD` is off or the
  namespace is labelled `kiln.dev/demo-workload: "false"`. A ConfigMap marks
  the namespace as seeded, so a workload someone deleted stays deleted.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

import audit
from kiln.cluster import AppliedRef, DeliveryBackend, DeliveryError
from kiln.cluster.nodes import L_ENVIRONMENT, L_TENANT_CONTROL_PLANE, L_WORKLOAD_CLASS, name_of
from kiln.identity.permissions import system_actor

ACTOR = "karpenter"
MANAGEMENT_NAMESPACE = "kiln-management"
MANAGEMENT_POOL = "kiln-management"
GENERAL_POOL = "kiln-general"
SYSTEM_NAMESPACE = "kube-system"
NODE_AGENT = "kiln-node-agent"
MARKER = "kiln-demo-workload"
L_DEMO = "kiln.dev/demo-workload"
MANAGEMENT_TAINT = {"key": "kiln.dev/management", "value": "true", "effect": "NoSchedule"}
GENERAL_TYPES = ("m6i.large", "m6i.xlarge", "m6i.2xlarge", "m6a.xlarge", "c6i.xlarge", "r6i.large")
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")


def _pool(name: str, types: tuple[str, ...], *, taints: list[dict], cpu: str, memory: str) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "kiln"}},
        "spec": {
            "template": {
                "metadata": {"labels": {"kiln.dev/pool-role": name.removeprefix("kiln-")}},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        },
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": list(types),
                        },
                        {
                            "key": "topology.kubernetes.io/zone",
                            "operator": "In",
                            "values": list(ZONES),
                        },
                    ],
                    "taints": taints,
                    "expireAfter": "720h",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "5m",
                "budgets": [{"nodes": "10%"}],
            },
            "limits": {"cpu": cpu, "memory": memory},
        },
    }


def node_agent() -> list[dict]:
    """The demo's node agent: the `kube-system` Namespace and a DaemonSet on every node."""
    labels = {"app": NODE_AGENT, L_WORKLOAD_CLASS: "standard"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}},
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": NODE_AGENT, "namespace": SYSTEM_NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"matchLabels": {"app": NODE_AGENT}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "agent",
                                "image": "registry.kiln.dev/demo/node-agent:1",
                                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                            }
                        ],
                        # An empty key with Exists tolerates every taint, as node agents do.
                        "tolerations": [{"operator": "Exists"}],
                    },
                },
            },
        },
    ]


def shared_pools() -> list[dict]:
    """The demo's cluster-wide NodePools: general on-demand capacity and the management pool."""
    return [
        _pool(GENERAL_POOL, GENERAL_TYPES, taints=[], cpu="256", memory="1024Gi"),
        _pool(
            MANAGEMENT_POOL,
            ("m6i.xlarge", "m6i.2xlarge"),
            taints=[MANAGEMENT_TAINT],
            cpu="64",
            memory="256Gi",
        ),
    ]


def deployment(
    *,
    namespace: str,
    name: str,
    workload_class: str,
    replicas: int,
    cpu: str,
    memory: str,
    tolerations: list[dict] | None = None,
    node_selector: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment of `replicas` pods of one workload class asking `cpu` and `memory` each."""
    pod_labels = {"app": name, L_WORKLOAD_CLASS: workload_class, **(labels or {})}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": name,
                "image": f"registry.kiln.dev/demo/{name}:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        "tolerations": list(tolerations or []),
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(pod_labels)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": pod_labels}, "spec": spec},
        },
    }


# The demo workload's Deployments: name, workload class, replicas, and each pod's cpu and memory.
DEMO_DEPLOYMENTS = (
    ("demo-web", "latency-sensitive", 2, "250m", "256Mi"),
    ("demo-batch", "batch", 3, "500m", "512Mi"),
)


def demo_workload(namespace: str) -> list[dict]:
    """An environment's demo workload: `demo-web` (latency-sensitive) and `demo-batch` (batch)."""
    tolerate = [
        {"key": L_ENVIRONMENT, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": MARKER, "namespace": namespace},
            "data": {"seeded": "true"},
        },
        *(
            deployment(
                namespace=namespace,
                name=name,
                workload_class=workload_class,
                replicas=replicas,
                cpu=cpu,
                memory=memory,
                tolerations=tolerate,
            )
            for name, workload_class, replicas, cpu, memory in DEMO_DEPLOYMENTS
        ),
    ]


def _plane_replicas(tcp: dict) -> int:
    """The replicas the TenantControlPlane asks for (0 while its environment sleeps)."""
    plane = ((tcp.get("spec") or {}).get("controlPlane") or {}).get("deployment") or {}
    replicas = plane.get("replicas", 2)
    return replicas if isinstance(replicas, int) and replicas >= 0 else 2


def _control_plane(tcp: dict) -> dict:
    namespace = (tcp.get("metadata") or {}).get("namespace", "")
    return deployment(
        namespace=MANAGEMENT_NAMESPACE,
        name=f"tcp-{namespace}-{name_of(tcp)}"[:63],
        workload_class="latency-sensitive",
        replicas=_plane_replicas(tcp),
        cpu="500m",
        memory="1Gi",
        tolerations=[{**MANAGEMENT_TAINT, "operator": "Equal"}],
        node_selector={"karpenter.sh/nodepool": MANAGEMENT_POOL},
        labels={L_TENANT_CONTROL_PLANE: f"{namespace}.{name_of(tcp)}"[:63]},
    )


def demo_cluster_reconcile(
    *, backend: DeliveryBackend, seed_workloads: bool
) -> dict[str, list[str]]:
    """Keep the shared pools, one control-plane Deployment per TenantControlPlane, and seed new environments."""
    seeded: list[str] = []
    skipped: list[str] = []
    wanted = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MANAGEMENT_NAMESPACE}}]
    wanted += shared_pools() + node_agent()
    tcps = backend.list("kamaji.clastix.io/v1alpha1", "TenantControlPlane", include_deleting=False)
    planes = [_control_plane(t) for t in tcps]
    live = {
        name_of(d): (d.get("spec") or {}).get("replicas", 1)
        for d in backend.list("apps/v1", "Deployment", MANAGEMENT_NAMESPACE)
    }
    have = set(live)
    wanted += [d for d in planes if name_of(d) not in have]
    # Kamaji scales a control plane's Deployment as its TenantControlPlane asks (to zero asleep).
    for plane in planes:
        name = name_of(plane)
        if name in live and live[name] != plane["spec"]["replicas"]:
            backend.scale(
                AppliedRef("apps/v1", "Deployment", MANAGEMENT_NAMESPACE, name),
                plane["spec"]["replicas"],
            )
    missing = [
        m
        for m in wanted
        if backend.get(m["apiVersion"], m["kind"], (m["metadata"].get("namespace")), name_of(m))
        is None
    ]
    if missing:
        backend.apply(missing, field_manager="kiln-demo")
    keep = {name_of(d) for d in planes}
    for name in sorted(have - keep):
        if name.startswith("tcp-"):
            backend.delete(AppliedRef("apps/v1", "Deployment", MANAGEMENT_NAMESPACE, name))
    if seed_workloads:
        for ns in backend.list("v1", "Namespace", None, L_ENVIRONMENT, include_deleting=False):
            namespace = name_of(ns)
            if (ns["metadata"].get("labels") or {}).get(L_DEMO) == "false":
                continue
            if backend.get("v1", "ConfigMap", namespace, MARKER) is not None:
                continue
            try:
                with transaction.atomic():
                    backend.apply(demo_workload(namespace), field_manager="kiln-demo")
                    audit.record(
                        system_actor(ACTOR),
                        "scheduler.demo_workload.seeded",
                        f"namespace:{namespace}",
                        {"deployments": ["demo-web", "demo-batch"]},
                    )
            except DeliveryError as exc:
                # The reaper may start tearing the namespace down between the list and the
                # apply; nothing was written, and a namespace still alive is seeded next tick.
                skipped.append(f"{namespace}: {exc}")
                continue
            seeded.append(namespace)
    return {"seeded": seeded, "skipped": skipped} if skipped else {"seeded": seeded}
