"""The pool rules (scheduler/pools.py): own pools, capacity pools as failure domains, k settings."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler import pools
from scheduler.pools import (
    REASON_NOT_OWN_POOL,
    REASON_OTHER_TENANT_POOL,
    REASON_SPREAD,
    Placements,
    PodPlacement,
    PoolLayout,
    SpreadConfigError,
)

FIT = 0


@pytest.mark.parametrize(
    "replicas, k, cap",
    [
        (2, 2, 1),  # ceil(2/2) = 1: two replicas never share a spot pool
        (3, 2, 2),  # ceil(3/2) = 2
        (10, 2, 5),
        (10, 3, 4),  # ceil(10/3) = 4
        (5, 1000, 1),  # k >= r: one spot replica per pool
        (1, 2, 1),  # a workload of one: never below one
    ],
    ids=["2-of-2", "3-of-2", "10-of-2", "10-of-3", "k-above-r", "single"],
)
def test_max_per_pool_is_ceil_of_replicas_over_k(replicas, k, cap):
    assert pools.max_per_pool(replicas, k) == cap


@pytest.mark.parametrize(
    "k", [0, -1, 1.5, True, "2"], ids=["zero", "negative", "float", "bool", "text"]
)
def test_a_k_below_one_or_not_whole_is_refused(k):
    with pytest.raises(SpreadConfigError, match="k must be a whole number >= 1"):
        pools.max_per_pool(4, k)


def test_spread_k_setting_parses_and_defaults_missing_classes_to_two():
    assert pools.parse_spread_k("batch=3") == {
        "latency-sensitive": 2,
        "standard": 2,
        "batch": 3,
    }
    assert pools.parse_spread_k(None) == dict.fromkeys(pools.SPREAD_CLASSES, 2)


@pytest.mark.parametrize(
    "text, message",
    [
        ("batch=0", "k for batch must be >= 1, not 0"),
        ("standard=-2", "k for standard must be >= 1"),
        ("batch=two", "k for batch must be a whole number"),
        ("gpu=2", "unknown workload class 'gpu'"),
        ("batch", "'batch' is not <class>=<k>"),
    ],
    ids=["zero", "negative", "not-a-number", "unknown-class", "no-equals"],
)
def test_spread_k_setting_refuses_bad_values_naming_them(text, message):
    with pytest.raises(SpreadConfigError, match=message):
        pools.parse_spread_k(text)


def pod(namespace="team-a", labels=None, owner=("ReplicaSet", "web-1")):
    refs = [{"kind": owner[0], "name": owner[1], "controller": True}] if owner else []
    return {"metadata": {"namespace": namespace, "labels": labels or {}, "ownerReferences": refs}}


def test_workload_is_the_spread_group_label_else_the_controller():
    assert pools.pod_placement(pod()).workload == "team-a/ReplicaSet/web-1"
    grouped = pools.pod_placement(pod(labels={pools.L_SPREAD_GROUP: "g"}))
    assert grouped.workload == "team-a/spread-group/g"
    assert pools.pod_placement(pod(owner=None)).workload == ""
    assert pools.pod_placement(pod(owner=("DaemonSet", "agent"))).daemon


@pytest.mark.parametrize(
    "body",
    [None, [], {"metadata": "x"}, {"metadata": {"labels": "x", "ownerReferences": "x"}}],
    ids=["none", "list", "metadata-text", "fields-text"],
)
def test_a_malformed_pod_reads_as_no_workload(body):
    placement = pools.pod_placement(body)
    assert placement.workload == "" and not placement.daemon


def layout():
    # Nodes: 0 shared on-demand; 1, 2 team-a's own pool (spot, two zones); 3 team-b's own pool.
    return PoolLayout.build(
        [
            ("m6i.large", "a", "on-demand", ""),
            ("m6i.large", "a", "spot", "team-a"),
            ("m6i.large", "b", "spot", "team-a"),
            ("m6i.large", "a", "spot", "team-b"),
        ]
    )


SPOT = np.array([False, True, True, True])
IDX = np.arange(4)


def test_a_pod_of_an_environment_with_its_own_pool_fits_only_there():
    reasons = np.zeros(4, dtype=np.int8)
    pools.apply(reasons, IDX, SPOT, layout(), PodPlacement("team-a", ""), None, 2)
    assert reasons.tolist() == [REASON_NOT_OWN_POOL, FIT, FIT, REASON_NOT_OWN_POOL]


def test_a_pod_of_no_environment_with_a_pool_never_lands_on_one():
    reasons = np.zeros(4, dtype=np.int8)
    pools.apply(reasons, IDX, SPOT, layout(), PodPlacement("shared-ns", ""), None, 2)
    assert reasons.tolist() == [
        FIT,
        REASON_OTHER_TENANT_POOL,
        REASON_OTHER_TENANT_POOL,
        REASON_OTHER_TENANT_POOL,
    ]


def test_a_daemonset_pod_runs_on_every_pool():
    reasons = np.zeros(4, dtype=np.int8)
    pools.apply(reasons, IDX, SPOT, layout(), PodPlacement("kube-system", "", daemon=True), None, 2)
    assert reasons.tolist() == [FIT] * 4


def test_an_own_pool_without_nodes_yet_still_holds_its_pods_off_shared_nodes():
    shared_only = PoolLayout.build([("m6i.large", "a", "on-demand", "")], own_pools=["team-a"])
    reasons = np.zeros(1, dtype=np.int8)
    pools.apply(
        reasons, np.arange(1), np.array([False]), shared_only, PodPlacement("team-a"), None, 2
    )
    assert reasons.tolist() == [REASON_NOT_OWN_POOL]


def test_a_full_capacity_pool_fails_its_spot_nodes_with_a_reason_naming_it():
    lay = layout()
    placed = Placements()
    placed.set_replicas("team-a/ReplicaSet/web-1", 4)
    placed.add("team-a/ReplicaSet/web-1", "m6i.large/a/spot", True, 2)  # ceil(4/2) = 2: full
    reasons = np.zeros(4, dtype=np.int8)
    verdict = pools.apply(
        reasons, IDX, SPOT, lay, PodPlacement("team-a", "team-a/ReplicaSet/web-1"), placed, 2
    )
    assert reasons.tolist() == [REASON_NOT_OWN_POOL, REASON_SPREAD, FIT, REASON_NOT_OWN_POOL]
    [message] = verdict.spread_messages.values()
    assert "m6i.large/a/spot" in message and "2 of" in message and "ceil(4/2) = 2" in message


def test_on_demand_replicas_are_not_counted_and_on_demand_nodes_never_fail_the_spread():
    placed = Placements()
    placed.set_replicas("w", 2)
    placed.add("w", "m6i.large/a/on-demand", False, 5)
    assert placed.counts.get("w", {}) == {}
    lay = PoolLayout.build([("m6i.large", "a", "on-demand", "")])
    placed.add("w", "m6i.large/a/on-demand", True, 1)  # as if spot, to fill the pool
    reasons = np.zeros(1, dtype=np.int8)
    pools.apply(reasons, np.arange(1), np.array([False]), lay, PodPlacement("ns", "w"), placed, 2)
    assert reasons.tolist() == [FIT]


def test_a_spread_group_of_one_pod_is_not_spread():
    placed = Placements()
    placed.set_replicas("ns/spread-group/lonely", 1)
    lay = PoolLayout.build([("t", "a", "spot", "")])
    reasons = np.zeros(1, dtype=np.int8)
    pools.apply(
        reasons,
        np.arange(1),
        np.array([True]),
        lay,
        PodPlacement("ns", "ns/spread-group/lonely"),
        placed,
        2,
    )
    assert reasons.tolist() == [FIT]


def test_replicas_never_fall_below_those_counted_plus_the_pod_being_placed():
    placed = Placements()
    placed.add("w", "p1", True, 3)  # replicas unknown: r = 3 + 1 = 4
    assert placed.replicas_of("w") == 4
    placed.set_replicas("w", 10)
    assert placed.replicas_of("w") == 10
    placed.remove("w", "p1", True, 3)
    assert placed.counts["w"] == {}


def test_reasons_already_failing_are_left_as_they_are():
    reasons = np.array([3, 1, 0, 0], dtype=np.int8)  # Insufficient cpu, spot guarantee
    pools.apply(reasons, IDX, SPOT, layout(), PodPlacement("team-a"), None, 2)
    assert reasons.tolist() == [3, 1, FIT, REASON_NOT_OWN_POOL]


def test_cluster_placements_count_bound_spot_replicas_and_every_live_pod_as_a_replica():
    lay = PoolLayout.from_labels(
        [
            {pools.L_INSTANCE_TYPE: "t", pools.L_ZONE: "a", pools.L_CAPACITY_TYPE: "spot"},
            {pools.L_INSTANCE_TYPE: "t", pools.L_ZONE: "a", pools.L_CAPACITY_TYPE: "on-demand"},
        ]
    )
    index = {"n-spot": 0, "n-od": 1}

    def p(node, phase="Running"):
        body = pod()
        body["spec"] = {"nodeName": node}
        body["status"] = {"phase": phase}
        return body

    placed = pools.cluster_placements(
        lay,
        index,
        np.array([True, False]),
        [p("n-spot"), p("n-spot"), p("n-od"), p(""), p("n-spot", "Succeeded")],
    )
    assert placed.replicas["team-a/ReplicaSet/web-1"] == 4  # the finished one is not a replica
    assert placed.counts["team-a/ReplicaSet/web-1"] == {"t/a/spot": 2}
