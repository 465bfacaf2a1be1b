"""Workload Commitment arithmetic (scheduler/commitment.py): worked cases and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import commitment as wc
from scheduler.commitment import PodDemand


def test_daemonsets_are_out_of_the_numerator_and_pending_is_beside_it():
    # Two nodes of 4000m / 16 GiB. On a: 1000m workload + 500m DaemonSet; on b: 3000m.
    # cpu committed = (1000 + 3000) / 8000 = 0.5 (the DaemonSet's 500m does not count);
    # a pending 2000m pod is pending = 2000, pending_ratio = 0.25, and the ratio stays 0.5.
    nodes = [("a", (4000, 16.0, 0)), ("b", (4000, 16.0, 0))]
    pods = [
        PodDemand("a", cpu=1000, memory=4.0),
        PodDemand("a", cpu=500, memory=1.0, daemonset=True),
        PodDemand("b", cpu=3000, memory=4.0),
        PodDemand(None, cpu=2000, memory=2.0),
        PodDemand("b", cpu=4000, memory=8.0, terminal=True),
    ]
    result = wc.from_pods(nodes, pods)
    cpu = result.resource("cpu")
    assert (cpu.committed, cpu.capacity, cpu.ratio) == (4000, 8000, 0.5)
    assert (cpu.pending, cpu.pending_ratio) == (2000, 0.25)
    assert (cpu.spread.min, cpu.spread.max) == (0.25, 0.75)
    assert result.resource("memory").ratio == 8.0 / 32.0
    assert (result.pending_pods, result.daemonset_pods) == (1, 1)
    # No node has a GPU: the ratio is undefined, not 0, and the spread is empty.
    gpu = result.resource("gpu")
    assert gpu.ratio is None and gpu.spread.max is None
    assert result.nodes[0].ratios == (0.25, 0.25, None)


def test_stranded_capacity_is_free_capacity_on_nodes_full_on_another_resource():
    # Node a: cpu 3800/4000 = 0.95 >= 0.9 (full), memory 2/16 used: its 14 free memory
    # is stranded. Node b: nothing full, so its free memory (16) is not stranded.
    result = wc.from_pods(
        [("a", (4000, 16.0, 0)), ("b", (4000, 16.0, 0))],
        [PodDemand("a", cpu=3800, memory=2.0)],
    )
    assert result.resource("memory").stranded == 14.0
    assert result.resource("cpu").stranded == 0.0


def test_zero_capacity_everywhere_is_undefined_not_a_division():
    result = wc.from_pods([], [PodDemand(None, cpu=100)])
    assert result.resource("cpu").ratio is None
    assert result.resource("cpu").pending == 100
    assert result.resource("cpu").pending_ratio is None
    assert result.as_dict()["resources"]["cpu"]["spread"] == {
        "min": None,
        "p50": None,
        "p90": None,
        "max": None,
    }


def test_pods_on_nodes_outside_the_set_count_nowhere():
    result = wc.from_pods([("a", (1000, 1.0, 0))], [PodDemand("gone", cpu=500)])
    assert result.resource("cpu").committed == 0


quantity = st.integers(min_value=0, max_value=64_000)
node_st = st.tuples(quantity, quantity, st.integers(min_value=0, max_value=8))


@st.composite
def clusters(draw):
    caps = draw(st.lists(node_st, min_size=0, max_size=12))
    names = [f"n{i}" for i in range(len(caps))]
    pods = draw(
        st.lists(
            st.builds(
                PodDemand,
                node=st.sampled_from([*names, None, "elsewhere"]),
                cpu=quantity,
                memory=quantity,
                gpu=st.integers(min_value=0, max_value=4),
                daemonset=st.booleans(),
                terminal=st.booleans(),
            ),
            max_size=40,
        )
    )
    return list(zip(names, caps, strict=True)), pods


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_cluster_ratio_is_the_capacity_weighted_mean_of_node_ratios_and_within_the_spread(case):
    nodes, pods = case
    result = wc.from_pods(nodes, pods)
    for r, res in enumerate(wc.RESOURCES):
        figure = result.resource(res)
        capacity = sum(cap[r] for _, cap in nodes)
        assert figure.capacity == capacity
        if capacity == 0:
            assert figure.ratio is None
            continue
        weighted = sum(n.ratios[r] * n.capacity[r] for n in result.nodes if n.ratios[r] is not None)
        assert math.isclose(figure.ratio, weighted / capacity, rel_tol=1e-9, abs_tol=1e-12)
        assert figure.spread.min - 1e-12 <= figure.ratio <= figure.spread.max + 1e-12
        assert figure.spread.min <= figure.spread.p50 <= figure.spread.p90 <= figure.spread.max
        free = sum(max(0.0, n.capacity[r] - n.committed[r]) for n in result.nodes)
        assert 0.0 <= figure.stranded <= free + 1e-9


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_daemonset_and_pending_pods_never_move_the_ratio(case):
    nodes, pods = case
    base = wc.from_pods(nodes, [p for p in pods if not p.daemonset and p.node is not None])
    full = wc.from_pods(nodes, pods)
    for res in wc.RESOURCES:
        assert full.resource(res).committed == base.resource(res).committed
        assert full.resource(res).ratio == base.resource(res).ratio
        expected = sum(
            getattr(p, res) for p in pods if p.node is None and not p.daemonset and not p.terminal
        )
        assert full.resource(res).pending == expected


@settings(max_examples=100, deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_order_of_nodes_and_pods_does_not_matter(case, rng):
    nodes, pods = case
    shuffled_nodes, shuffled_pods = list(nodes), list(pods)
    rng.shuffle(shuffled_nodes)
    rng.shuffle(shuffled_pods)
    a, b = wc.from_pods(nodes, pods), wc.from_pods(shuffled_nodes, shuffled_pods)
    assert a.as_dict(per_node=False) == b.as_dict(per_node=False)
    assert sorted(a.as_dict()["nodes"], key=lambda n: n["name"]) == sorted(
        b.as_dict()["nodes"], key=lambda n: n["name"]
    )


@pytest.mark.parametrize("n", [1, 5])
def test_compute_accepts_arrays_as_the_replay_passes_them(n):
    capacity = np.full((n, 3), 10.0)
    committed = np.full((n, 3), 5.0)
    result = wc.compute([f"m{i}" for i in range(n)], capacity, committed)
    assert all(result.resource(r).ratio == 0.5 for r in wc.RESOURCES)
