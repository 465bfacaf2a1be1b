"""Fixtures of the scheduler tests: priced inventory, pods and nodes shaped like kube-scheduler's."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from kiln.cluster.backends import get_backend
from kiln.cluster.simulated import SimulatedBackend
from kiln.identity.models import Team
from portal.compose import EnvironmentSpec, node_pool, pool_annotations
from scheduler import seed, selectors
from scheduler.models import InstanceType, InterruptionBucket, Node, NodeSource, SpotPrice
from scheduler.simulation.demo import demo_workload, shared_pools

TRACE_DIR = Path(django_settings.BASE_DIR).parent / "shared" / "data" / "google-2011"
GIB = 2**30
EXPLANATION = {"node": "ip-pay", "score": 8, "terms": {"cost": 0.9, "packing": 0.5, "risk": 0.98}}


@pytest.fixture(autouse=True)
def _fresh_snapshot(settings):
    """No snapshot caching across tests: each call reads the database."""
    settings.KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS = 0.0
    selectors.snapshot_invalidate()
    yield
    selectors.snapshot_invalidate()


def make_node(
    name: str, capacity: str | None, itype: str = "m6i.xlarge", zone: str = "us-east-1a", **kw
) -> Node:
    labels = {"node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/zone": zone}
    if capacity is not None:
        labels["karpenter.sh/capacity-type"] = capacity
    return Node.objects.create(
        name=name,
        labels=labels,
        capacity_type=capacity or "unknown",
        instance_type=itype,
        zone=zone,
        allocatable_cpu_millis=kw.get("cpu", 4000),
        allocatable_memory_bytes=kw.get("mem", 16 * GIB),
        allocatable_gpus=kw.get("gpus", 0),
        requested_cpu_millis=kw.get("req_cpu", 0),
        requested_memory_bytes=kw.get("req_mem", 0),
        requested_gpus=0,
        source=NodeSource.SIMULATED,
        synced_at=timezone.now(),
    )


@pytest.fixture
def inventory(db) -> dict[str, Node]:
    """Three priced nodes: on-demand m6i.xlarge, spot m6i.xlarge (cheap), and an unpriced one."""
    m6i = InstanceType.objects.create(
        name="m6i.xlarge",
        family="m6i",
        vcpu=4,
        memory_gib=Decimal("16"),
        on_demand_hourly=Decimal("0.1920"),
    )
    SpotPrice.objects.create(
        instance_type=m6i,
        zone="us-east-1a",
        hourly=Decimal("0.0650"),
        interruption_bucket=InterruptionBucket.UNDER_5,
        observed_at=timezone.now(),
    )
    return {
        "od": make_node("node-od", "on-demand"),
        "spot": make_node("node-spot", "spot"),
        "mystery": make_node("node-mystery", None, itype="x9.huge"),
    }


def pod(
    workload_class: str | None = "standard", cpu: str = "500m", memory: str = "1Gi", **extra
) -> dict:
    """A v1.Pod as kube-scheduler serialises it (only the fields that matter here, plus noise)."""
    labels = {"app": "web", "pod-template-hash": "5d8f7"}
    if workload_class is not None:
        labels["kiln.dev/workload-class"] = workload_class
    return {
        "metadata": {
            "name": "web-5d8f7-abcde",
            "namespace": "payments",
            "uid": "0f0e",
            "labels": labels,
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "web:1",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                },
                {
                    "name": "sidecar",
                    "image": "proxy:1",
                    "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                },
            ],
            "schedulerName": "default-scheduler",
            **extra,
        },
        "status": {"phase": "Pending"},
    }


def node_object(name: str, capacity: str | None, cpu: str = "3920m", memory: str = "14Gi") -> dict:
    """A v1.Node as kube-scheduler sends it with nodeCacheCapable: false."""
    labels = {"kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "m6i.xlarge"}
    if capacity is not None:
        labels["karpenter.sh/capacity-type"] = capacity
    return {
        "metadata": {"name": name, "labels": labels, "resourceVersion": "42"},
        "spec": {"providerID": f"aws:///us-east-1a/{name}"},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "58"},
        },
    }


# --- objects of the simulated cluster, in the shape the simulated Karpenter and scheduler write ---


def cluster_node(
    name: str,
    capacity: str = "on-demand",
    *,
    itype: str = "m6i.xlarge",
    zone: str = "us-east-1a",
    cpu: str = "4",
    memory: str = "16Gi",
    gpus: int = 0,
    nodepool: str = "default",
    environment: str | None = None,
) -> dict:
    """Apply a v1 Node to the simulated cluster with its allocatable in status; return it."""
    labels = {
        "node.kubernetes.io/instance-type": itype,
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/capacity-type": capacity,
        "karpenter.sh/nodepool": nodepool,
    }
    if environment:
        labels["kiln.dev/environment"] = environment
    manifest = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": []},
    }
    backend = get_backend("simulated")
    (ref,) = backend.apply([manifest])
    allocatable = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)}
    backend.set_status(ref, {"allocatable": allocatable, "capacity": allocatable})
    return backend.get("v1", "Node", None, name)


def cluster_pod(
    name: str,
    node: str | None,
    *,
    namespace: str = "payments",
    cpu: str = "500m",
    memory: str = "1Gi",
    gpus: int = 0,
    owner: str = "ReplicaSet",
    workload_class: str | None = "standard",
    phase: str | None = None,
    explanation: dict | None = None,
    labels: dict[str, str] | None = None,
) -> dict:
    """Apply a v1 Pod (bound to `node`, or pending as Unschedulable) to the simulated cluster."""
    labels = {"app": name.rsplit("-", 1)[0], **(labels or {})}
    if workload_class is not None:
        labels["kiln.dev/workload-class"] = workload_class
    requests = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    metadata: dict = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": owner, "name": "web", "controller": True}
        ],
    }
    if explanation is not None:
        metadata["annotations"] = {"kiln.dev/score-explanation": json.dumps(explanation)}
    spec: dict = {"containers": [{"name": "main", "resources": {"requests": requests}}]}
    if node:
        spec["nodeName"] = node
    backend = get_backend("simulated")
    (ref,) = backend.apply(
        [{"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}]
    )
    if node:
        status = {
            "phase": phase or "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
        }
    else:
        status = {
            "phase": phase or "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 Insufficient cpu.",
                }
            ],
        }
    backend.set_status(ref, status)
    return backend.get("v1", "Pod", namespace, name)


@pytest.fixture
def cluster(db):
    """Teams payments and search, each with an environment namespace and a node of its
    NodePool, a shared node, and pods of both teams and of the platform."""
    Team.objects.create(slug="payments", name="Payments")
    Team.objects.create(slug="search", name="Search")
    backend = get_backend("simulated")
    backend.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kiln.dev/team": team}},
            }
            for ns, team in (("pay-dev", "payments"), ("search-dev", "search"))
        ]
    )
    cluster_node("ip-shared", "on-demand", nodepool="general")
    cluster_node(
        "ip-pay", "spot", nodepool="kiln-pay-dev", environment="pay-dev", zone="us-east-1b"
    )
    cluster_node("ip-search", "on-demand", nodepool="kiln-search-dev", environment="search-dev")
    # cpu on 12000m of capacity: 1000 (pay) + 2000 (search) = 3000 committed; the DaemonSet's
    # 250m is left out; the pending 8000m pod is beside it.
    cluster_pod(
        "web-1",
        "ip-pay",
        namespace="pay-dev",
        cpu="1",
        workload_class="batch",
        explanation=EXPLANATION,
    )
    cluster_pod("index-1", "ip-shared", namespace="search-dev", cpu="2", workload_class=None)
    cluster_pod("agent-1", "ip-shared", namespace="kube-system", cpu="250m", owner="DaemonSet")
    cluster_pod("huge-1", None, namespace="pay-dev", cpu="8")
    return backend


NS_ENV = "team-a-dev"


def environment_cluster(*extra: dict) -> SimulatedBackend:
    """The simulated cluster with team-a's ephemeral environment (a spot NodePool), the demo's
    shared pools, `extra` manifests and the environment's demo workload (nothing placed yet)."""
    seed.seed_demo()
    b = SimulatedBackend()
    spec = EnvironmentSpec(
        request_id="r1",
        team="team-a",
        name="dev",
        namespace=NS_ENV,
        env_class="ephemeral",
        ttl_hours=8,
        workload_class="batch",
        cpu=16,
        memory_gib=64,
        spot_node_pool=True,
    )
    b.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                # As composed: the admission annotations put every pod on its own pool.
                "metadata": {
                    "name": NS_ENV,
                    "labels": {"kiln.dev/environment": NS_ENV},
                    "annotations": pool_annotations(spec),
                },
            },
            node_pool(spec),
            *shared_pools(),
            *extra,
        ]
    )
    b.apply(demo_workload(NS_ENV))
    return b
