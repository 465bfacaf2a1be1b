"""The simulated Karpenter under the pool rules: a full capacity pool makes it launch into another
one the NodePool allows, an environment's pods get nodes only from its own pool."""

from __future__ import annotations

from collections import Counter

from scheduler import karpenter
from scheduler.karpenter import Offering, PendingPod, Pool, plan_launches

INF = float("inf")


def offer(t, zone, capacity, price):
    return Offering(t, zone, capacity, cpu=4.0, memory=16e9, gpu=0.0, price=price)


def pool(name, offerings, environment=""):
    return Pool(
        name=name,
        environment=environment,
        labels={},
        taints=[],
        offerings=offerings,
        limits=(INF, INF, INF),
    )


def replica(i, workload="team-a/ReplicaSet/batch", cap=2, held=None, namespace="team-a"):
    return PendingPod(
        key=f"{namespace}/batch-{i}",
        cpu=0.5,
        memory=5e8,
        gpu=0.0,
        spec={},
        needs_on_demand=False,
        namespace=namespace,
        workload=workload,
        cap=cap,
        held=dict(held or {}),
    )


def spot_pools(plan):
    count = Counter()
    for node in plan.nodes:
        if node.offering.capacity_type == "spot":
            count[f"{node.offering.instance_type}/{node.offering.zone}/spot"] += len(node.pods)
    return count


def test_replicas_that_would_fill_one_capacity_pool_are_launched_into_others():
    own = pool(
        "kiln-team-a",
        [
            offer("m6a.xlarge", "a", "spot", 0.05),
            offer("m6a.xlarge", "b", "spot", 0.06),
            offer("m6i.xlarge", "a", "spot", 0.07),
            offer("m6i.xlarge", "a", "on-demand", 0.19),
        ],
        environment="team-a",
    )
    # Five replicas, k = 2: cap 3. Without the rule all five would pack on one cheapest node.
    plan = plan_launches([own], [replica(i, cap=3) for i in range(5)])
    assert not plan.waiting
    assert sum(len(n.pods) for n in plan.nodes) == 5
    assert max(spot_pools(plan).values()) <= 3


def test_pools_already_full_in_the_cluster_count_too():
    own = pool(
        "kiln-team-a",
        [offer("m6a.xlarge", "a", "spot", 0.05), offer("m6a.xlarge", "b", "spot", 0.06)],
        environment="team-a",
    )
    held = {"m6a.xlarge/a/spot": 2}  # cap 2: the cheapest pool is full already
    plan = plan_launches([own], [replica(0, held=held), replica(1, held=held)])
    assert [n.offering.zone for n in plan.nodes] == ["b"]
    assert spot_pools(plan) == {"m6a.xlarge/b/spot": 2}


def test_when_every_allowed_pool_is_full_the_pods_wait_with_the_reason():
    one_pool = pool("kiln-team-a", [offer("m6a.xlarge", "a", "spot", 0.05)], environment="team-a")
    plan = plan_launches([one_pool], [replica(i, cap=1) for i in range(3)])
    # One replica per pool and one pool: the first gets a node, the others wait, never a crash.
    assert sum(len(n.pods) for n in plan.nodes) == 1
    assert set(plan.waiting.values()) == {karpenter.REASON_SPREAD}


def test_an_environments_pods_get_nodes_only_from_its_own_pool_and_others_never_from_it():
    general = pool("kiln-general", [offer("m5.large", "a", "on-demand", 0.01)])
    own = pool("kiln-team-a", [offer("m6a.xlarge", "a", "spot", 0.05)], environment="team-a")
    mine = replica(0, workload="", cap=0)
    theirs = replica(1, workload="", cap=0, namespace="shop")
    plan = plan_launches([general, own], [mine, theirs])
    by_pod = {pod: node.pool for node in plan.nodes for pod in node.pods}
    # general is cheaper, yet team-a's pod goes to its own pool; the shop's never goes there.
    assert by_pod == {"team-a/batch-0": "kiln-team-a", "shop/batch-1": "kiln-general"}
