"""Property: after any sequence of placements through the spread filter (and removals), no
capacity pool holds more than ceil(r / k) spot replicas of a workload; every pod the filter
refuses could not have gone to that pool without breaking it."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import pools
from scheduler.pools import Placements, PodPlacement, PoolLayout

FIT = 0


@st.composite
def clusters(draw):
    """Random nodes over a few capacity pools (some spot), and random workloads."""
    types = draw(
        st.lists(
            st.sampled_from(["m5.large", "m6i.large", "c6i.xlarge"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    zones = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    n = draw(st.integers(min_value=1, max_value=30))
    nodes = [
        (
            draw(st.sampled_from(types)),
            draw(st.sampled_from(zones)),
            draw(st.sampled_from(["spot", "spot", "on-demand"])),
            "",
        )
        for _ in range(n)
    ]
    workloads = draw(
        st.lists(
            st.tuples(
                st.integers(min_value=1, max_value=25), st.integers(min_value=1, max_value=6)
            ),
            min_size=1,
            max_size=5,
        )
    )  # (replicas, k)
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=len(workloads) - 1),
                st.booleans(),  # True: place a replica, False: remove one
                st.integers(min_value=0, max_value=10**6),  # which passing node / which replica
            ),
            max_size=120,
        )
    )
    return nodes, workloads, steps


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_no_pool_ever_holds_more_than_its_share_of_a_workloads_spot_replicas(case):
    nodes, workloads, steps = case
    layout = PoolLayout.build(nodes)
    spot = np.array([c == "spot" for _, _, c, _ in nodes])
    idx = np.arange(len(nodes))
    placed = Placements()
    running: dict[int, list[int]] = {w: [] for w in range(len(workloads))}
    for w, (replicas, _) in enumerate(workloads):
        placed.set_replicas(f"w{w}", replicas)
    for w, place, pick in steps:
        replicas, k = workloads[w]
        key = f"w{w}"
        if place:
            if len(running[w]) >= replicas:
                continue  # the workload has all its replicas
            reasons = np.zeros(len(nodes), dtype=np.int8)
            pools.apply(reasons, idx, spot, layout, PodPlacement("ns", key), placed, k)
            passing = np.flatnonzero(reasons == FIT)
            if not passing.size:
                continue  # Pending, with a reason: never a crash
            node = int(passing[pick % passing.size])
            running[w].append(node)
            placed.add(key, layout.pools[layout.pool_of[node]], bool(spot[node]))
        elif running[w]:
            node = running[w].pop(pick % len(running[w]))
            placed.remove(key, layout.pools[layout.pool_of[node]], bool(spot[node]))
        # The invariant, recounted from the placements themselves.
        for v, (r, kk) in enumerate(workloads):
            cap = math.ceil(r / kk) if r >= 2 else r
            per_pool: dict[int, int] = {}
            for node in running[v]:
                if spot[node]:
                    per_pool[layout.pool_of[node]] = per_pool.get(layout.pool_of[node], 0) + 1
            assert max(per_pool.values(), default=0) <= max(cap, 1), (v, per_pool, cap)


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_more_replicas_than_pools_times_k_leaves_the_rest_pending_or_on_demand(case):
    nodes, workloads, _ = case
    layout = PoolLayout.build(nodes)
    spot = np.array([c == "spot" for _, _, c, _ in nodes])
    idx = np.arange(len(nodes))
    replicas, k = 100, workloads[0][1]  # far more than pools x k can take on spot
    placed = Placements()
    placed.set_replicas("big", replicas)
    on_spot = 0
    for _ in range(replicas):
        reasons = np.zeros(len(nodes), dtype=np.int8)
        pools.apply(reasons, idx, spot, layout, PodPlacement("ns", "big"), placed, k)
        passing = np.flatnonzero((reasons == FIT) & spot)
        if not passing.size:
            assert all(r in (FIT, pools.REASON_SPREAD) for r in reasons.tolist())
            break
        node = int(passing[0])
        placed.add("big", layout.pools[layout.pool_of[node]], True)
        on_spot += 1
    spot_pools = len({layout.pool_of[i] for i in range(len(nodes)) if spot[i]})
    assert on_spot <= spot_pools * math.ceil(replicas / k)
