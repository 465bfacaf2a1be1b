"""Worked cases and properties of scheduler/scoring.py (pure, no database)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import scoring, scoring_kernel
from scheduler.scoring import (
    BATCH,
    FIT,
    LATENCY_SENSITIVE,
    REASON_INSUFFICIENT_CPU,
    REASON_INSUFFICIENT_GPU,
    REASON_INSUFFICIENT_MEMORY,
    REASON_SPOT_LATENCY_SENSITIVE,
    REASON_ZERO_CAPACITY,
    STANDARD,
    NodeArrays,
    PodRequest,
    Weights,
)

NAN = float("nan")


def nodes(*rows: tuple) -> NodeArrays:
    """rows: (alloc_cpu, alloc_mem, alloc_gpu, req_cpu, req_mem, req_gpu, price, interruption, spot)."""
    return NodeArrays.from_matrix(np.array(rows, dtype=np.float64))


# A general-purpose node: 4 cores, 16 GiB (in GiB units here), no GPU.
def od(price: float, req_cpu: float = 0.0, req_mem: float = 0.0) -> tuple:
    return (4, 16, 0, req_cpu, req_mem, 0, price, 0.0, 0)


def spot(
    price: float, likelihood: float = 0.5, req_cpu: float = 0.0, req_mem: float = 0.0
) -> tuple:
    return (4, 16, 0, req_cpu, req_mem, 0, price, likelihood, 1)


POD = PodRequest(cpu=1, memory=4, workload_class=STANDARD)


@pytest.mark.parametrize(
    ("cluster", "pod", "expected"),
    [
        # One on-demand node, a quarter used. cost: the only node is the cheapest -> 1.0;
        # packing: cpu (1+1)/4 = 0.5, mem (4+4)/16 = 0.5 -> fill 0.5, left 0.5 and 0.5 ->
        # balance 1 -> 0.5*0.5 + 0.5*1 = 0.75; risk 0 -> 1 - 0 = 1.
        # 0.5*1 + 0.3*0.75 + 0.2*1 = 0.925 -> round(9.25) = 9.
        ([od(0.2, 1, 4)], POD, [9]),
        # Same shape, empty, prices 0.1 and 0.2. share 0.25 both; cost 1.0 and 0.5;
        # packing: fill 0.25, balance 1 -> 0.625 both; risk 0. A: 0.5 + 0.1875 + 0.2 = 0.8875 -> 9;
        # B: 0.25 + 0.1875 + 0.2 = 0.6375 -> round(6.375) = 6.
        ([od(0.1), od(0.2)], POD, [9, 6]),
        # Batch pod, spot 0.07 (likelihood 0.5) vs on-demand 0.2. cost: spot 1.0, od 0.07/0.2 = 0.35;
        # packing 0.625; risk: spot 0.5 * restart 0.1 = 0.05, od 0.
        # spot: 0.5 + 0.1875 + 0.2*0.95 = 0.8775 -> 9; od: 0.175 + 0.1875 + 0.2 = 0.5625 -> 6.
        ([spot(0.07), od(0.2)], PodRequest(1, 4, 0, BATCH), [9, 6]),
        # Standard pod, same two nodes: restart cost 0.5 -> spot risk 0.25.
        # spot: 0.5 + 0.1875 + 0.2*0.75 = 0.8375 -> round(8.375) = 8; od: 0.5625 -> 6.
        ([spot(0.07), od(0.2)], PodRequest(1, 4, 0, STANDARD), [8, 6]),
        # Latency-sensitive pod: the spot node is filtered (score 0); the on-demand node is the
        # only feasible one, so it is the cheapest: 0.5 + 0.1875 + 0.2 = 0.8875 -> 9.
        ([spot(0.07), od(0.2)], PodRequest(1, 4, 0, LATENCY_SENSITIVE), [0, 9]),
        # Bin packing: equal price, one node 3/4 full. Full: cpu (3+1)/4 = 1, mem (12+4)/16 = 1 ->
        # fill 1, nothing left -> balance 1 -> packing 1; empty: 0.625.
        # full: 0.5 + 0.3 + 0.2 = 1.0 -> 10; empty: 0.8875 -> 9.
        ([od(0.2, 3, 12), od(0.2)], POD, [10, 9]),
    ],
    ids=[
        "one-node",
        "cheaper-wins",
        "batch-prefers-spot",
        "standard-pays-risk",
        "latency-skips-spot",
        "packs",
    ],
)
def test_score_nodes_worked_cases(cluster, pod, expected):
    assert scoring.score_nodes(nodes(*cluster), pod, Weights()).tolist() == expected


@pytest.mark.parametrize(
    ("row", "pod", "reason"),
    [
        (spot(0.1), PodRequest(1, 4, 0, LATENCY_SENSITIVE), REASON_SPOT_LATENCY_SENSITIVE),
        (spot(0.1), PodRequest(1, 4, 0, STANDARD), FIT),
        (spot(0.1), PodRequest(1, 4, 0, BATCH), FIT),
        # An unknown class is latency-sensitive (workload_class_of maps it; the filter agrees).
        (spot(0.1), PodRequest(1, 4, 0, "gold"), REASON_SPOT_LATENCY_SENSITIVE),
        # 3.5 cores used + 1 > 4: cpu does not fit.
        (od(0.1, 3.5, 0), POD, REASON_INSUFFICIENT_CPU),
        (od(0.1, 0, 13), POD, REASON_INSUFFICIENT_MEMORY),
        (od(0.1), PodRequest(1, 4, 1, STANDARD), REASON_INSUFFICIENT_GPU),
        # The guarantee outranks fit, so preemption is never offered a spot node.
        (
            spot(0.1, req_cpu=4),
            PodRequest(1, 4, 0, LATENCY_SENSITIVE),
            REASON_SPOT_LATENCY_SENSITIVE,
        ),
        ((0, 16, 0, 0, 0, 0, 0.1, 0, 0), POD, REASON_ZERO_CAPACITY),
        ((4, 0, 0, 0, 0, 0, 0.1, 0, 0), PodRequest(0, 0, 0, STANDARD), REASON_ZERO_CAPACITY),
    ],
    ids=[
        "latency-on-spot",
        "standard-on-spot",
        "batch-on-spot",
        "unknown-class-on-spot",
        "cpu",
        "memory",
        "gpu",
        "guarantee-beats-fit",
        "zero-cpu",
        "zero-memory",
    ],
)
def test_filter_reasons(row, pod, reason):
    assert scoring.filter_nodes(nodes(row), pod).tolist() == [reason]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"kiln.dev/workload-class": "batch"}, BATCH),
        ({"kiln.dev/workload-class": "standard"}, STANDARD),
        ({"kiln.dev/workload-class": "latency-sensitive"}, LATENCY_SENSITIVE),
        ({}, LATENCY_SENSITIVE),
        (None, LATENCY_SENSITIVE),
        ({"kiln.dev/workload-class": "Batch"}, LATENCY_SENSITIVE),
    ],
    ids=["batch", "standard", "latency", "missing", "no-labels", "unknown-case"],
)
def test_workload_class_missing_or_unknown_is_latency_sensitive(labels, expected):
    assert scoring.workload_class_of(labels) == expected


@pytest.mark.parametrize(
    ("prices", "expected"),
    [
        # Unpriced (NaN) costs the highest known price: 0.3.
        ([0.1, NAN, 0.3], [0.1, 0.3, 0.3]),
        # Nothing priced: every node costs 1.0, so cost ties and does not decide.
        ([NAN, NAN], [1.0, 1.0]),
        ([0.2], [0.2]),
    ],
    ids=["one-unpriced", "all-unpriced", "all-priced"],
)
def test_unpriced_node_costs_the_highest_known_price(prices, expected):
    assert scoring.effective_prices(np.array(prices)).tolist() == expected


def test_unpriced_node_never_beats_the_dearest_priced_node():
    # Identical shapes: unpriced is treated as 0.3 (the dearest), so it ties with it
    # and both lose to the cheap node. cost: 1.0 / (0.1/0.3) -> 0.333; packing 0.625;
    # cheap: 0.5 + 0.1875 + 0.2 = 0.8875 -> 9; dear and unpriced: 0.1667 + 0.3875 = 0.5542 -> 6.
    scores = scoring.score_nodes(nodes(od(0.1), od(0.3), od(NAN)), POD, Weights()).tolist()
    assert scores == [9, 6, 6]


@pytest.mark.parametrize(
    ("row", "pod", "expected"),
    [
        # cpu and memory 0.25 used after placement: fill 0.25, balance 1 -> 0.625 before GPUs.
        # No-GPU pod on a node whose only GPU is free: 0.625 * (1 - 1/1) = 0.
        ((8, 32, 1, 0, 0, 0, 1.0, 0, 0), PodRequest(2, 8, 0, STANDARD), 0.0),
        # Two GPUs, one used: stranded fraction 0.5 -> 0.625 * 0.5 = 0.3125.
        ((8, 32, 2, 0, 0, 1, 1.0, 0, 0), PodRequest(2, 8, 0, STANDARD), 0.3125),
        # Every GPU in use: nothing left to strand -> plain 0.625.
        ((8, 32, 1, 0, 0, 1, 1.0, 0, 0), PodRequest(2, 8, 0, STANDARD), 0.625),
        # A GPU pod counts GPUs in the fill: (0.25 + 0.25 + 1/1) / 3 = 0.5 -> 0.5*0.5 + 0.5*1 = 0.75.
        ((8, 32, 1, 0, 0, 0, 1.0, 0, 0), PodRequest(2, 8, 1, STANDARD), 0.75),
        # A CPU-only node is not penalised: 0.625.
        ((8, 32, 0, 0, 0, 0, 1.0, 0, 0), PodRequest(2, 8, 0, STANDARD), 0.625),
    ],
    ids=["all-gpus-stranded", "half-stranded", "none-free", "gpu-pod", "cpu-node"],
)
def test_gpu_stranding_penalty(row, pod, expected):
    assert scoring.packing_term(nodes(row), pod).tolist() == pytest.approx([expected])


def test_cpu_pod_prefers_a_cpu_node_over_a_gpu_node_at_equal_price():
    # cost equal (1.0 both), risk 0. cpu node packing 0.625 -> 0.8875 -> 9;
    # gpu node packing 0 -> 0.5 + 0 + 0.2 = 0.7 -> 7.
    cluster = nodes((8, 32, 0, 0, 0, 0, 1.0, 0, 0), (8, 32, 1, 0, 0, 0, 1.0, 0, 0))
    assert scoring.score_nodes(cluster, PodRequest(2, 8, 0, STANDARD), Weights()).tolist() == [9, 7]


def test_balanced_node_beats_a_node_left_with_cpu_stranded_at_equal_price_and_risk():
    """Packing penalises stranding: of two same-priced on-demand nodes, the one the pod leaves
    with as much cpu as memory free wins over a fuller one left with its cpu used up."""
    # Pod 1 core, 4 GiB on 4-core 16 GiB nodes: cost 1.0 and risk 0 on both.
    # stranded: (2.5+1)/4 = 0.875 cpu, (2+4)/16 = 0.375 mem -> fill 0.625, left 0.125 and 0.625
    #   -> balance 0.2 -> packing 0.4125 -> 0.5 + 0.12375 + 0.2 = 0.82375 -> 8
    #   (mean utilisation alone: 0.625 -> 0.8875 -> 9).
    # balanced: (1+1)/4 = 0.5, (4+4)/16 = 0.5 -> fill 0.5, balance 1 -> packing 0.75
    #   -> 0.5 + 0.225 + 0.2 = 0.925 -> 9 (mean utilisation alone: 0.5 -> 0.85 -> 9, a tie).
    cluster = nodes(od(0.2, 2.5, 2), od(0.2, 1, 4))
    assert scoring.packing_term(cluster, POD).tolist() == pytest.approx([0.4125, 0.75])
    reasons = scoring.filter_nodes(cluster, POD)
    reference = scoring.score_nodes(cluster, POD, Weights(), reasons)
    compiled = scoring_kernel.score_rows(cluster.to_matrix(), POD, Weights(), reasons)
    assert reference.tolist() == compiled.tolist() == [8, 9]


@pytest.mark.parametrize(
    ("cpu", "mem", "expected"),
    [
        ((0.5,), (0.5,), 1.0),  # as much of each left
        ((1.0,), (1.0,), 1.0),  # nothing left, nothing stranded
        ((1.0,), (0.5,), 0.0),  # cpu used up, half the memory stranded
        ((0.0,), (0.5,), 0.5),  # all cpu and half the memory left
        ((0.875,), (0.375,), 0.2),
    ],
    ids=["even", "full", "cpu-used-up", "half", "skewed"],
)
def test_balance_after_placement(cpu, mem, expected):
    assert scoring.balance_after(np.array(cpu), np.array(mem)).tolist() == pytest.approx([expected])


@pytest.mark.parametrize(
    ("weights", "ok"),
    [
        ((0.5, 0.3, 0.2), True),
        ((1, 0, 0), True),
        ((1 / 3, 1 / 3, 1 / 3), True),
        ((0.6, 0.3, 0.2), False),  # sums to 1.1
        ((0.5, 0.3, 0.1), False),  # sums to 0.9
        ((-0.1, 0.9, 0.2), False),  # negative
        ((1.5, -0.3, -0.2), False),  # sums to 1 but out of [0, 1]
        ((math.nan, 0.5, 0.5), False),
        ((math.inf, 0, 0), False),
        (("0.5", 0.3, 0.2), False),  # not a number
        ((True, 0, 0), False),  # a bool is not a weight
    ],
    ids=[
        "default",
        "cost-only",
        "thirds",
        "over",
        "under",
        "negative",
        "out-of-range",
        "nan",
        "inf",
        "string",
        "bool",
    ],
)
def test_weights_validation(weights, ok):
    if ok:
        assert Weights(*weights).cost == weights[0]
    else:
        with pytest.raises(scoring.WeightsError):
            Weights(*weights)


def test_zero_capacity_is_guarded_without_floating_point_errors():
    cluster = nodes((0, 0, 0, 0, 0, 0, 0.1, 0, 0), (0, 16, 0, 0, 0, 0, NAN, NAN, 1), od(0.2))
    pod = PodRequest(1, 4, 0, STANDARD)
    with np.errstate(all="raise"):
        reasons = scoring.filter_nodes(cluster, pod)
        scores = scoring.score_nodes(cluster, pod, Weights(), reasons)
        packing = scoring.packing_term(cluster, pod)
        share = scoring.dominant_share(cluster, pod)
    assert reasons.tolist() == [REASON_ZERO_CAPACITY, REASON_ZERO_CAPACITY, FIT]
    assert packing.tolist()[:2] == [0.0, 0.0]
    assert share.tolist()[:2] == [math.inf, math.inf]
    compiled = scoring_kernel.score_rows(cluster.to_matrix(), pod, Weights(), reasons)
    # The one feasible node is the cheapest: 0.5 + 0.3*0.625 + 0.2 = 0.8875 -> 9.
    assert scores.tolist() == compiled.tolist() == [0, 0, 9]


def test_no_feasible_node_scores_all_zero():
    cluster = nodes(spot(0.1), spot(0.2))
    assert scoring.score_nodes(cluster, PodRequest(1, 4), Weights()).tolist() == [0, 0]


def test_pod_requesting_nothing_is_compared_on_price_alone():
    # share 0 -> cost on price: 0.1 -> 1.0, 0.2 -> 0.5. packing: fill 0, balance 1 -> 0.5 both.
    # 0.5 + 0.15 + 0.2 = 0.85 -> 9; 0.25 + 0.15 + 0.2 = 0.6 -> 6.
    scores = scoring.score_nodes(nodes(od(0.1), od(0.2)), PodRequest(0, 0, 0, STANDARD), Weights())
    assert scores.tolist() == [9, 6]


# --- properties over random clusters -------------------------------------------------------

row_strategy = st.tuples(
    st.sampled_from([0.0, 1.0, 2.0, 4.0, 8.0, 64.0]),  # alloc cpu (0 = zero capacity)
    st.sampled_from([0.0, 4.0, 16.0, 64.0, 256.0]),  # alloc memory
    st.sampled_from([0.0, 0.0, 1.0, 4.0]),  # alloc gpus
    st.floats(0, 1.2),  # requested cpu as a fraction of allocatable
    st.floats(0, 1.2),  # requested memory fraction
    st.floats(0, 1),  # requested gpu fraction
    st.one_of(st.just(NAN), st.floats(0.0001, 100.0), st.just(0.0)),  # price (NaN = unpriced)
    st.one_of(st.just(NAN), st.sampled_from([0.1, 0.3, 0.5, 0.7, 1.0])),  # interruption
    st.booleans(),  # spot
)
pod_strategy = st.builds(
    PodRequest,
    cpu=st.sampled_from([0.0, 0.1, 0.5, 2.0]),
    memory=st.sampled_from([0.0, 0.5, 4.0, 32.0]),
    gpu=st.sampled_from([0.0, 0.0, 1.0]),
    workload_class=st.sampled_from([LATENCY_SENSITIVE, STANDARD, BATCH, "unknown"]),
)
weights_strategy = st.sampled_from(
    [Weights(), Weights(1, 0, 0), Weights(0, 1, 0), Weights(0, 0, 1), Weights(0.9, 0.05, 0.05)]
)


def cluster_from(rows: list[tuple]) -> np.ndarray:
    matrix = np.array([list(r) for r in rows], dtype=np.float64)
    matrix[:, 3] *= matrix[:, 0]
    matrix[:, 4] *= matrix[:, 1]
    matrix[:, 5] = np.floor(matrix[:, 5] * matrix[:, 2])
    return matrix


@settings(max_examples=120, deadline=None)
@given(st.lists(row_strategy, min_size=1, max_size=40), pod_strategy, weights_strategy)
def test_property_latency_or_unknown_pod_never_gets_a_spot_node(rows, pod, weights):
    matrix = cluster_from(rows)
    cluster = NodeArrays.from_matrix(matrix)
    latency_pod = PodRequest(
        pod.cpu, pod.memory, pod.gpu, scoring.workload_class_of({"x": pod.workload_class})
    )
    reasons = scoring.filter_nodes(cluster, latency_pod)
    scores = scoring.score_nodes(cluster, latency_pod, weights, reasons)
    assert (reasons[cluster.spot] == REASON_SPOT_LATENCY_SENSITIVE).all()
    assert (scores[cluster.spot] == 0).all()
    feasible = reasons == FIT
    if feasible.any():
        best = np.flatnonzero(feasible)[np.argmax(scores[feasible])]
        assert not cluster.spot[best]


@settings(max_examples=120, deadline=None)
@given(st.lists(row_strategy, min_size=1, max_size=40), pod_strategy, weights_strategy)
def test_property_scores_are_integers_in_0_to_10_and_compiled_equals_reference(rows, pod, weights):
    matrix = cluster_from(rows)
    cluster = NodeArrays.from_matrix(matrix)
    reasons = scoring.filter_nodes(cluster, pod)
    reference = scoring.score_nodes(cluster, pod, weights, reasons)
    compiled = scoring_kernel.score_rows(matrix, pod, weights, reasons)
    assert reference.dtype == compiled.dtype == np.int64
    assert ((reference >= 0) & (reference <= 10)).all()
    assert reference.tolist() == compiled.tolist()


@settings(max_examples=120, deadline=None)
@given(
    st.lists(row_strategy, min_size=1, max_size=30),
    st.integers(0, 29),
    st.floats(0.01, 0.99),
    pod_strategy,
    weights_strategy,
)
def test_property_cheaper_node_never_scores_lower(rows, pick, discount, pod, weights):
    matrix = cluster_from(rows)
    i = pick % len(rows)
    if math.isnan(matrix[i, 6]):
        matrix[i, 6] = 1.0
    twin = matrix[i].copy()
    twin[6] = matrix[i, 6] * discount  # same shape, load and risk; cheaper
    matrix = np.vstack([matrix, twin])
    reasons = scoring.filter_matrix(matrix, pod)
    scores = scoring.score_matrix(matrix, pod, weights, reasons)
    assert scores[-1] >= scores[i]


@settings(max_examples=120, deadline=None)
@given(
    st.lists(row_strategy, min_size=1, max_size=40),
    st.lists(st.integers(0, 39), min_size=1, max_size=60),
    pod_strategy,
    weights_strategy,
)
def test_property_kernel_over_sampled_rows_equals_the_reference_and_names_the_best_score(
    rows, picks, pod, weights
):
    """The replay gathers the machines its sampling picked (repeats allowed) and hands the kernel
    those rows: reasons and scores are the reference's, and the best FIT score comes back
    (-1 when nothing fits), which is what the replay's candidates are chosen by."""
    cluster = cluster_from(rows)
    sampled = cluster[[p % len(rows) for p in picks]]
    latency = scoring_kernel.is_latency_sensitive(pod.workload_class)
    reasons = np.empty(len(sampled), dtype=np.int8)
    usable = np.ones(len(sampled), dtype=np.bool_)
    scoring_kernel.filter_all(sampled, usable, 0, pod.cpu, pod.memory, pod.gpu, latency, reasons)
    nodes = NodeArrays.from_matrix(sampled)
    assert reasons.tolist() == scoring.filter_nodes(nodes, pod).tolist()
    scores = np.empty(len(sampled), dtype=np.int64)
    best = scoring_kernel.score_all(
        sampled,
        reasons,
        pod.cpu,
        pod.memory,
        pod.gpu,
        weights.cost,
        weights.packing,
        weights.risk,
        scoring_kernel.restart_cost(pod.workload_class),
        scores,
    )
    expected = scoring.score_nodes(nodes, pod, weights, reasons)
    assert scores.tolist() == expected.tolist()
    feasible = reasons == FIT
    assert best == (int(expected[feasible].max()) if feasible.any() else -1)
