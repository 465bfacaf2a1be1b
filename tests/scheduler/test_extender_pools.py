"""The extender's pool rules over the wire: own pools and the capacity-pool spread filter, in both
nodeCacheCapable modes, the compiled answer equal to the numpy reference, reasons naming pools."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from scheduler import pools
from scheduler.extender.handler import FILTER, PRIORITIZE, extender_call
from scheduler.extender.protocol import parse_args
from scheduler.extender.snapshot import NodeSnapshot
from scheduler.extender.verbs import filter_result

# name, instance type, zone, capacity type, environment label
NODES = [
    ("shared-od", "m6i.large", "a", "on-demand", ""),
    ("a-spot-1", "m6i.large", "a", "spot", "team-a"),
    ("a-spot-2", "m6i.large", "a", "spot", "team-a"),
    ("a-spot-3", "m6i.large", "b", "spot", "team-a"),
    ("a-od", "m6i.large", "a", "on-demand", "team-a"),
    ("b-spot", "m6i.large", "c", "spot", "team-b"),
]
WORKLOAD = "team-a/ReplicaSet/batch-1"


def labels(t, z, c, env):
    out = {pools.L_INSTANCE_TYPE: t, pools.L_ZONE: z, pools.L_CAPACITY_TYPE: c}
    if env:
        out[pools.L_ENVIRONMENT] = env
    return out


def snapshot(placements=None) -> NodeSnapshot:
    matrix = np.array(
        [
            [
                2.0,
                8e9,
                0,
                0,
                0,
                0,
                0.1 if c == "spot" else 0.2,
                0.1 if c == "spot" else 0.0,
                float(c == "spot"),
            ]
            for _, _, _, c, _ in NODES
        ]
    )
    layout = pools.PoolLayout.build([(t, z, c, e) for _, t, z, c, e in NODES])
    return NodeSnapshot(
        [n[0] for n in NODES], matrix, max_price=0.2, layout=layout, placements=placements
    )


def pod(namespace="team-a", klass="batch", owner="batch-1", extra_labels=None):
    return {
        "metadata": {
            "name": "p",
            "namespace": namespace,
            "labels": {"kiln.dev/workload-class": klass, **(extra_labels or {})},
            "ownerReferences": [{"kind": "ReplicaSet", "name": owner, "controller": True}],
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
    }


def node_objects():
    return [
        {
            "metadata": {"name": name, "labels": labels(t, z, c, e)},
            "status": {"allocatable": {"cpu": "2", "memory": "8G"}},
        }
        for name, t, z, c, e in NODES
    ]


def body(p, cache_mode=True):
    if cache_mode:
        return orjson.dumps({"Pod": p, "Nodes": None, "NodeNames": [n[0] for n in NODES]})
    return orjson.dumps({"Pod": p, "Nodes": {"items": node_objects()}, "NodeNames": None})


def call(snap, p, cache_mode=True, verb=FILTER):
    status, raw = extender_call(verb, body(p, cache_mode), None, lambda: snap)
    assert status == 200
    return orjson.loads(raw)


def passing(result):
    if result["NodeNames"] is not None:
        return result["NodeNames"]
    return [n["metadata"]["name"] for n in result["Nodes"]["items"]]


@pytest.mark.parametrize("cache_mode", [True, False], ids=["nodeCacheCapable", "full-nodes"])
def test_a_pod_of_an_environment_with_its_own_pool_passes_only_its_pools_nodes(cache_mode):
    result = call(snapshot(), pod(), cache_mode)
    assert passing(result) == ["a-spot-1", "a-spot-2", "a-spot-3", "a-od"]
    # Unresolvable, so preemption cannot move it off its pool; the reason says why.
    assert result["FailedAndUnresolvableNodes"] == {
        "shared-od": pools.REASON_MESSAGES[pools.REASON_NOT_OWN_POOL],
        "b-spot": pools.REASON_MESSAGES[pools.REASON_NOT_OWN_POOL],
    }


@pytest.mark.parametrize("cache_mode", [True, False], ids=["nodeCacheCapable", "full-nodes"])
def test_another_tenants_pod_never_lands_on_an_environments_own_nodes(cache_mode):
    result = call(snapshot(), pod(namespace="shop", owner="web"), cache_mode)
    assert passing(result) == ["shared-od"]
    assert set(result["FailedAndUnresolvableNodes"]) == {n[0] for n in NODES} - {"shared-od"}


@pytest.mark.parametrize("cache_mode", [True, False], ids=["nodeCacheCapable", "full-nodes"])
def test_a_full_capacity_pool_is_unschedulable_with_a_reason_naming_it(cache_mode):
    placed = pools.Placements()
    placed.set_replicas(WORKLOAD, 4)  # k = 2: ceil(4/2) = 2 per pool
    placed.add(WORKLOAD, "m6i.large/a/spot", True, 2)
    snap = snapshot(placed)
    result = call(snap, pod(), cache_mode)
    # a-spot-1 and a-spot-2 are the full pool; a-spot-3 (zone b) and on-demand still pass.
    assert passing(result) == ["a-spot-3", "a-od"]
    reason = result["FailedAndUnresolvableNodes"]["a-spot-1"]
    assert reason == result["FailedAndUnresolvableNodes"]["a-spot-2"]
    assert "capacity pool m6i.large/a/spot already holds 2" in reason
    assert "ceil(4/2) = 2" in reason
    # The compiled answer equals the numpy reference, call after call (nothing stale cached).
    for _ in range(2):
        reference = filter_result(parse_args(body(pod(), cache_mode), snap), snap)
        assert call(snap, pod(), cache_mode) == orjson.loads(orjson.dumps(reference))
    # Prioritize scores a node the filter fails at 0.
    scores = {h["Host"]: h["Score"] for h in call(snap, pod(), cache_mode, PRIORITIZE)}
    assert scores["a-spot-1"] == scores["a-spot-2"] == scores["shared-od"] == 0
    assert scores["a-spot-3"] > 0


def test_the_pools_count_changes_the_answer_not_a_stale_cached_map():
    placed = pools.Placements()
    placed.set_replicas(WORKLOAD, 4)
    snap = snapshot(placed)
    assert "a-spot-1" in passing(call(snap, pod()))
    placed.add(WORKLOAD, "m6i.large/a/spot", True, 2)
    assert "a-spot-1" not in passing(call(snap, pod()))
    placed.remove(WORKLOAD, "m6i.large/a/spot", True, 1)
    assert "a-spot-1" in passing(call(snap, pod()))


def test_a_spread_group_label_on_one_pod_only_spreads_nothing():
    placed = pools.Placements()
    placed.add("team-a/spread-group/lonely", "m6i.large/a/spot", True, 1)  # r = 1 + 1 = 2
    placed.set_replicas("team-a/spread-group/lonely", 1)
    lonely = pod(extra_labels={pools.L_SPREAD_GROUP: "lonely"})
    # r never falls below those counted plus this pod (2), so cap = 1: the pool it is in is full.
    result = call(snapshot(placed), lonely)
    assert passing(result) == ["a-spot-3", "a-od"]
    fresh = pools.Placements()
    fresh.set_replicas("team-a/spread-group/lonely", 1)
    assert passing(call(snapshot(fresh), lonely)) == ["a-spot-1", "a-spot-2", "a-spot-3", "a-od"]


def test_a_snapshot_without_a_layout_answers_as_before():
    plain = snapshot()
    plain.layout = None
    assert passing(call(plain, pod(namespace="shop", klass="standard"))) == [n[0] for n in NODES]
