"""The simulated cluster's scheduling end to end on the simulated backend: Karpenter launches, kube-scheduler
binds through the extender, reclaims evict and re-place, disruption removes empty nodes."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from audit.models import OutboxEvent
from kiln.cluster.nodes import (
    A_SCORE_EXPLANATION,
    L_NODEPOOL,
    labels_of,
    name_of,
    node_list,
    pod_list,
    pod_node,
    pod_scheduled_condition,
    score_explanation,
)
from scheduler.simulation import cluster_tick
from scheduler.simulation.demo import GENERAL_POOL, deployment
from scheduler.simulation.disruption import nodes_disrupt
from scheduler.simulation.kubescheduler import KubeScheduler, latency_sensitive_on_spot
from scheduler.simulation.provisioner import nodes_provision
from scheduler.simulation.reclaims import node_reclaim_notice, spot_reclaims
from scheduler.simulation.workloads import workloads_reconcile
from tests.scheduler.conftest import NS_ENV, environment_cluster


def capacity_pool_of(node):
    """The node's capacity pool: instance type / zone / capacity type."""
    labels = labels_of(node)
    return (
        f"{labels['node.kubernetes.io/instance-type']}/{labels['topology.kubernetes.io/zone']}"
        f"/{labels['karpenter.sh/capacity-type']}"
    )


pytestmark = pytest.mark.django_db

NS = NS_ENV


@pytest.fixture
def backend(settings):
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    settings.KILN_SIM_SPOT_NOTICE_SECONDS = 0.0
    return environment_cluster()


def tick(b):
    return cluster_tick(backend=b, seconds=0.0, rng=random.Random(1), demo=False)


def test_demo_workload_lands_on_its_own_pool_latency_sensitive_on_demand_batch_on_spot(backend):
    report = tick(backend)
    pods = pod_list(backend, namespace=NS)
    assert len(pods) == 5 and all(pod_node(p) for p in pods), report
    nodes = {name_of(n): n for n in node_list(backend)}
    batch_pools = Counter()
    for pod in pods:
        node = nodes[pod_node(pod)]
        capacity = labels_of(node)["karpenter.sh/capacity-type"]
        # Every pod on the environment's own pool, none on the shared kiln-general.
        assert labels_of(node)[L_NODEPOOL] == f"kiln-{NS}" != GENERAL_POOL
        assert labels_of(node)["kiln.dev/environment"] == NS
        if labels_of(pod)["app"] == "demo-web":
            assert capacity == "on-demand"
        else:
            # batch pods: spot, the cheapest offering that fits
            assert capacity == "spot"
            batch_pools[capacity_pool_of(node)] += 1
        explanation = score_explanation(pod)
        assert explanation["node"] == pod_node(pod) and 0 <= explanation["score"] <= 10
    # Three batch replicas, k = 2: at most ceil(3/2) = 2 in one capacity pool.
    assert sum(batch_pools.values()) == 3 and max(batch_pools.values()) <= 2
    assert latency_sensitive_on_spot(backend) == []
    assert OutboxEvent.objects.filter(action="scheduler.nodes.launched").exists()


def test_a_reclaimed_spot_node_evicts_its_pods_and_they_are_placed_again(backend):
    tick(backend)
    [spot] = [n for n in node_list(backend, capacity_type="spot")][:1]
    before = {name_of(p) for p in pod_list(backend, namespace=NS, node=name_of(spot))}
    assert before
    evicted = node_reclaim_notice(backend=backend, node=spot)
    assert {e.split("/")[1] for e in evicted} == before
    events = backend.list("v1", "Event", "default")
    assert events[0]["reason"] == "SpotInterrupted"
    assert spot_reclaims(backend=backend, seconds=0.0)["reclaimed"] == [name_of(spot)]
    tick(backend)
    pods = pod_list(backend, namespace=NS)
    assert len(pods) == 5 and all(pod_node(p) and pod_node(p) != name_of(spot) for p in pods)
    assert name_of(spot) not in {name_of(n) for n in node_list(backend)}
    assert OutboxEvent.objects.filter(action="scheduler.node.reclaim_noticed").count() == 1
    assert OutboxEvent.objects.filter(action="scheduler.node.reclaimed").count() == 1
    assert latency_sensitive_on_spot(backend) == []


def test_a_pod_larger_than_every_instance_type_stays_pending_with_a_reason(backend):
    huge = deployment(
        namespace=NS, name="huge", workload_class="batch", replicas=1, cpu="500", memory="1Gi"
    )
    backend.apply([huge])
    tick(backend)
    [pod] = [p for p in pod_list(backend, namespace=NS) if labels_of(p)["app"] == "huge"]
    condition = pod_scheduled_condition(pod)
    assert not pod_node(pod)
    assert condition["reason"] == "Unschedulable"
    assert "Insufficient cpu" in condition["message"] and condition["message"].startswith("0/")
    tick(backend)  # the loop keeps going, and the others stay placed
    assert sum(1 for p in pod_list(backend, namespace=NS) if pod_node(p)) == 5


def test_a_killed_pod_is_replaced_by_its_workload(backend):
    tick(backend)
    victim = pod_list(backend, namespace=NS)[0]
    assert backend.carry_out_pod_kill(namespace=NS, pods=[name_of(victim)]) == [name_of(victim)]
    made = workloads_reconcile(backend=backend)
    assert len(made.created) == 1
    tick(backend)
    pods = pod_list(backend, namespace=NS)
    assert len(pods) == 5 and name_of(victim) not in {name_of(p) for p in pods}


def test_empty_nodes_are_consolidated_after_consolidate_after(backend, settings):
    from datetime import timedelta

    from django.utils import timezone

    tick(backend)
    for d in ("demo-web", "demo-batch"):
        backend.delete(backend_ref(d))
    workloads_reconcile(backend=backend)
    nodes_disrupt(backend=backend)  # marks them empty
    later = timezone.now() + timedelta(minutes=6)
    gone = nodes_disrupt(backend=backend, now=later)
    assert gone and all(reason == "Empty" for _, reason in gone)


def backend_ref(name):
    from kiln.cluster import AppliedRef

    return AppliedRef("apps/v1", "Deployment", NS, name)


@pytest.mark.parametrize("cache_mode", [True, False], ids=["nodeCacheCapable", "full-nodes"])
def test_both_extender_modes_bind(backend, cache_mode):
    workloads_reconcile(backend=backend)
    KubeScheduler(backend=backend, node_cache_capable=cache_mode).run()
    nodes_provision(backend=backend)
    result = KubeScheduler(backend=backend, node_cache_capable=cache_mode).run()
    assert len(result.bound) == 5
    pod = pod_list(backend, namespace=NS)[0]
    assert A_SCORE_EXPLANATION in pod["metadata"]["annotations"]
    assert score_explanation(pod)["nodeCacheCapable"] is cache_mode


def test_deleting_an_environments_nodepool_drains_and_removes_its_nodes_in_order(backend):
    from kiln.cluster import AppliedRef

    shared = deployment(
        namespace="default",
        name="shared",
        workload_class="standard",
        replicas=1,
        cpu="100m",
        memory="64Mi",
    )
    backend.apply([shared])  # a workload of no environment: on the shared kiln-general pool
    tick(backend)
    pool = f"kiln-{NS}"
    assert node_list(backend, nodepool=pool)
    for d in ("demo-web", "demo-batch"):  # teardown deletes the workloads, then the pool
        backend.delete(AppliedRef("apps/v1", "Deployment", NS, d))
    backend.delete(AppliedRef("karpenter.sh/v1", "NodePool", "", pool))
    tick(backend)
    assert node_list(backend, environment=NS, include_deleting=True) == []
    drained = OutboxEvent.objects.filter(action="scheduler.node.drained")
    assert {e.data["reason"] for e in drained} == {"NodePoolDeleted"}
    assert node_list(backend, nodepool=GENERAL_POOL)  # other pools keep their nodes


class _Draws:
    """A random source that always draws `value` (the reclaim draw is `random() < p`)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def test_reclaims_are_drawn_at_the_scaled_rate_and_a_zero_scale_reclaims_nothing(backend, settings):
    tick(backend)
    spot = {name_of(n) for n in node_list(backend, capacity_type="spot")}
    assert spot
    settings.KILN_SIM_SPOT_RECLAIM_SCALE = 0.0
    assert spot_reclaims(backend=backend, seconds=3600.0, rng=_Draws(0.0))["noticed"] == []
    settings.KILN_SIM_SPOT_RECLAIM_SCALE = 20000.0
    # p = 1 - e^(-rate * 60 s) is about 0.01-0.11 per spot node by band: a draw of 0.999 never
    # falls under it, a draw of 0.0 always does.
    assert spot_reclaims(backend=backend, seconds=60.0, rng=_Draws(0.999))["noticed"] == []
    noticed = spot_reclaims(backend=backend, seconds=60.0, rng=_Draws(0.0))["noticed"]
    assert set(noticed) == spot
    assert OutboxEvent.objects.filter(action="scheduler.node.reclaim_noticed").count() == len(spot)


def test_more_replicas_than_one_capacity_pool_may_hold_stay_pending_naming_the_pool(backend):
    from kiln.cluster import AppliedRef

    for d in ("demo-web", "demo-batch"):
        backend.delete(AppliedRef("apps/v1", "Deployment", NS, d))
    pool = backend.get("karpenter.sh/v1", "NodePool", None, f"kiln-{NS}")
    requirements = pool["spec"]["template"]["spec"]["requirements"]
    for r in requirements:  # one capacity pool only: one type, one zone, spot
        r["values"] = {
            "karpenter.sh/capacity-type": ["spot"],
            "node.kubernetes.io/instance-type": ["m6a.xlarge"],
            "topology.kubernetes.io/zone": ["us-east-1a"],
        }[r["key"]]
    pool["metadata"].pop("resourceVersion", None)
    backend.apply([pool])
    backend.apply(
        [
            deployment(
                namespace=NS,
                name="wide",
                workload_class="batch",
                replicas=4,
                cpu="100m",
                memory="64Mi",
            )
        ]
    )
    tick(backend)
    tick(backend)  # Karpenter has nothing to launch into: the rest stays Pending, no crash
    pods = [p for p in pod_list(backend, namespace=NS) if labels_of(p)["app"] == "wide"]
    bound = [p for p in pods if pod_node(p)]
    assert len(pods) == 4 and len(bound) == 2  # k = 2: ceil(4/2) = 2 in the one pool
    for p in pods:
        if not pod_node(p):
            message = pod_scheduled_condition(p)["message"]
            assert "capacity pool m6a.xlarge/us-east-1a/spot already holds 2" in message
