"""The score explainer's workings (scheduler/score_terms.py): the same numbers as score_nodes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import scoring
from scheduler.score_terms import score_terms
from scheduler.scoring import STANDARD, NodeArrays, PodRequest, Weights

W = Weights()


def test_an_xlarge_at_twice_a_larges_price_costs_the_pod_the_same():
    # large: 2 cores, 8 GiB at $0.096/h; xlarge: 4 cores, 16 GiB at $0.192/h, both empty.
    # Pod 0.5 cores, 1 GiB: share 0.25 and 0.125, pod cost 0.096*0.25 = 0.192*0.125 = $0.024/h,
    # so both cost terms are 1.0 and only packing tells them apart: fill (0.25 + 0.125)/2 =
    # 0.1875 on the large and 0.09375 on the xlarge, balance 0.75/0.875 and 0.875/0.9375.
    # large: 0.5*0.1875 + 0.5*0.857 = 0.522 -> 0.5 + 0.3*0.522 + 0.2 = 0.857 -> 9;
    # xlarge: 0.5*0.094 + 0.5*0.933 = 0.513 -> 0.854 -> 9.
    nodes = NodeArrays.from_matrix(
        np.array([[2, 8, 0, 0, 0, 0, 0.096, 0, 0], [4, 16, 0, 0, 0, 0, 0.192, 0, 0]], float)
    )
    terms = score_terms(nodes, PodRequest(cpu=0.5, memory=1, workload_class=STANDARD), W)
    assert np.allclose(terms.pod_cost, [0.024, 0.024]) and terms.cheapest == 0.024
    assert np.allclose(terms.cost, [1.0, 1.0])
    assert np.allclose(terms.packing.value, [0.5223214, 0.5135417])
    assert terms.score.tolist() == [9, 9]


rows = st.tuples(
    st.sampled_from([0.0, 2.0, 4.0, 8.0]),  # alloc cpu
    st.sampled_from([0.0, 8.0, 16.0, 32.0]),  # alloc mem
    st.sampled_from([0.0, 1.0, 4.0]),  # alloc gpu
    st.floats(0, 8),
    st.floats(0, 32),
    st.sampled_from([0.0, 1.0]),
    st.one_of(st.just(float("nan")), st.floats(0, 5)),  # price
    st.one_of(st.just(float("nan")), st.sampled_from([0.1, 0.5, 1.0])),
    st.sampled_from([0.0, 1.0]),  # spot
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(rows, min_size=1, max_size=8),
    st.floats(0, 4),
    st.floats(0, 16),
    st.sampled_from([0.0, 1.0]),
    st.sampled_from(scoring.WORKLOAD_CLASSES),
)
def test_the_workings_give_exactly_the_extenders_scores(matrix, cpu, mem, gpu, cls):
    nodes = NodeArrays.from_matrix(np.array(matrix, dtype=np.float64))
    pod = PodRequest(cpu=cpu, memory=mem, gpu=gpu, workload_class=cls)
    terms = score_terms(nodes, pod, W)
    assert terms.score.tolist() == scoring.score_nodes(nodes, pod, W).tolist()
    feasible = terms.feasible
    if feasible.any():
        assert np.array_equal(
            terms.raw[feasible], scoring.combined_score(nodes, pod, W, feasible)[feasible]
        )
        assert np.array_equal(terms.packing.value, scoring.packing_term(nodes, pod))
