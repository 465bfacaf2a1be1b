"""The simulated Karpenter's decisions and kube-scheduler's default filters (pure: no database)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from scheduler import karpenter as k
from scheduler.kubefilters import (
    REASON_AFFINITY,
    NodeTable,
    matches_affinity,
    tolerates,
    unschedulable_message,
)

GIB = 2.0**30


def offering(itype, zone, capacity, cpu, mem_gib, price):
    return k.Offering(itype, zone, capacity, cpu, mem_gib * GIB, 0.0, price)


OFFERS = [
    offering("m6i.large", "a", "on-demand", 2, 8, 0.096),
    offering("m6i.xlarge", "a", "on-demand", 4, 16, 0.192),
    offering("m6i.xlarge", "a", "spot", 4, 16, 0.065),
    offering("m6i.2xlarge", "a", "spot", 8, 32, 0.13),
]


def pool(name="p", offers=OFFERS, limits=(1e9, 1e18, 1e9), taints=None, **kw):
    return k.Pool(name, "", {}, taints or [], list(offers), limits, **kw)


def pod(key, cpu, mem_gib=1, ls=False, spec=None):
    return k.PendingPod(key, cpu, mem_gib * GIB, 0.0, spec or {}, needs_on_demand=ls)


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        # One 1-core batch pod: the cheapest offering that holds it is m6i.xlarge spot ($0.065).
        ([pod("a", 1)], [("m6i.xlarge", "spot", ["a"])]),
        # A latency-sensitive pod may not go to spot: the cheapest on-demand that fits, m6i.large.
        ([pod("a", 1, ls=True)], [("m6i.large", "on-demand", ["a"])]),
        # Three 2.5-core batch pods: first-fit-decreasing packs all three (7.5 cores) onto one
        # planned node, which keeps only the 8-core offerings; the cheapest is m6i.2xlarge spot.
        (
            [pod("a", 2.5), pod("b", 2.5), pod("c", 2.5)],
            [("m6i.2xlarge", "spot", ["a", "b", "c"])],
        ),
    ],
    ids=["cheapest-spot", "latency-sensitive-on-demand", "packed"],
)
def test_launches_pick_the_cheapest_offering_that_fits_the_packed_pods(pods, expected):
    plan = k.plan_launches([pool()], pods)
    got = [(n.offering.instance_type, n.offering.capacity_type, sorted(n.pods)) for n in plan.nodes]
    assert got == expected and plan.waiting == {}


def test_a_pod_larger_than_every_offering_waits_with_a_reason():
    plan = k.plan_launches([pool()], [pod("huge", 64)])
    assert plan.nodes == [] and plan.waiting == {"huge": k.REASON_NO_OFFERING}


def test_limits_stop_launches_and_say_so():
    # The pool allows 3 cores; the 1-core pod would take a 4-core (or 2-core on-demand) node.
    only_spot = [o for o in OFFERS if o.capacity_type == "spot"]
    plan = k.plan_launches([pool(offers=only_spot, limits=(3, 1e18, 1e9))], [pod("a", 1)])
    assert plan.waiting == {"a": k.REASON_LIMITS}


def test_an_untolerated_pool_taint_makes_the_pool_incompatible():
    taint = {"key": "kiln.dev/environment", "value": "x", "effect": "NoSchedule"}
    plan = k.plan_launches([pool(taints=[taint])], [pod("a", 1)])
    assert plan.waiting == {"a": k.REASON_NO_POOL}
    tol = {"key": "kiln.dev/environment", "operator": "Equal", "value": "x", "effect": "NoSchedule"}
    assert k.plan_launches([pool(taints=[taint])], [pod("a", 1, spec={"tolerations": [tol]})]).nodes


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("720h", 2592000.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("Never", None),
        ("", None),
        ("5x", None),
    ],
)
def test_durations_read_as_go_writes_them(text, seconds):
    assert k.parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("budget", "nodes", "allowed"),
    [("20%", 10, 2), ("20%", 3, 1), ("10%", 0, 0), ("2", 10, 2), ("x", 10, 0)],
    ids=["percent", "rounded-up", "empty-pool", "count", "unreadable"],
)
def test_the_disruption_budget(budget, nodes, allowed):
    assert k.budget_allows(budget, nodes) == allowed


def test_disruption_expires_forcefully_and_consolidates_within_the_budget():
    p = pool(expire_after=100.0, consolidate_after=60.0, budget="1")
    nodes = [
        k.NodeState("old", "p", age=200.0, empty_for=None, disrupting=False),
        k.NodeState("empty-1", "p", age=10.0, empty_for=90.0, disrupting=False),
        k.NodeState("empty-2", "p", age=10.0, empty_for=70.0, disrupting=False),
        k.NodeState("fresh-empty", "p", age=10.0, empty_for=30.0, disrupting=False),
    ]
    # "old" expires whatever the budget; the budget of 1 is then used up by it.
    assert k.plan_disruptions([p], nodes) == [("old", "Expired")]
    p.budget = "3"
    assert k.plan_disruptions([p], nodes) == [
        ("old", "Expired"),
        ("empty-1", "Empty"),
        ("empty-2", "Empty"),
    ]


def test_tolerations_and_affinity_as_kubernetes_reads_them():
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates([{"key": "k", "operator": "Exists"}], taint)
    assert tolerates([{"operator": "Exists"}], taint)
    assert not tolerates([{"key": "k", "value": "w"}], taint)
    assert not tolerates([{"key": "k", "value": "v", "effect": "NoExecute"}], taint)
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                    ]
                }
            }
        }
    }
    assert matches_affinity({"zone": "a"}, spec) and matches_affinity({"gpu": "1"}, spec)
    assert not matches_affinity({"zone": "b"}, spec)
    assert not matches_affinity({"zone": "a"}, {"nodeSelector": {"disk": "ssd"}})


def test_default_filters_count_each_node_under_its_first_failing_plugin():
    table = NodeTable(
        names=["cordoned", "tainted", "small", "other-zone", "ok"],
        labels=[{"zone": "a"}, {"zone": "a"}, {"zone": "a"}, {"zone": "b"}, {"zone": "a"}],
        taints=[[], [{"key": "t", "value": "1", "effect": "NoSchedule"}], [], [], []],
        unschedulable=np.array([True, False, False, False, False]),
        allocatable=np.array([[4, 8, 0]] * 5, dtype=float),
        requested=np.array([[0, 0, 0], [0, 0, 0], [3.5, 0, 0], [0, 0, 0], [0, 0, 0]], dtype=float),
    )
    ok, counts = table.feasible({"nodeSelector": {"zone": "a"}}, np.array([1.0, 1.0, 0.0]))
    assert list(ok) == [False, False, False, False, True]
    assert counts == Counter(
        {
            "node(s) were unschedulable": 1,
            "node(s) had untolerated taint {t: 1}": 1,
            "Insufficient cpu": 1,
            REASON_AFFINITY: 1,
        }
    )
    assert unschedulable_message(5, counts) == (
        "0/5 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node "
        "affinity/selector, 1 node(s) had untolerated taint {t: 1}, 1 node(s) were unschedulable."
    )
