"""The default kube-scheduler model: sampling size and resource scores, worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler import kubedefault


@pytest.mark.parametrize(
    ("nodes", "percentage", "expected"),
    [
        (50, 0, 50),  # fewer than 100 nodes: all of them
        (1000, 0, 420),  # adaptive: 50 - 1000/125 = 42% -> 420
        (5000, 0, 500),  # 50 - 40 = 10% -> 500
        (12477, 0, 623),  # 50 - 99 = -49 -> floor 5% -> 12477*5//100 = 623
        (1500, 5, 100),  # 5% of 1500 = 75, raised to the minimum of 100
        (1000, 100, 1000),  # 100%: every node
    ],
    ids=["small", "adaptive-1000", "adaptive-5000", "google-cell", "minimum-100", "all"],
)
def test_num_feasible_nodes_to_find(nodes, percentage, expected):
    assert kubedefault.num_feasible_nodes_to_find(nodes, percentage) == expected


def arr(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


@pytest.mark.parametrize(
    ("alloc", "req", "pod", "expected"),
    [
        # cpu (4-1-1)*100/4 = 50, mem (16-4-4)*100/16 = 50 -> (50+50)//2 = 50.
        ((4, 16), (1, 4), (1, 4), 50),
        # empty node, pod 1/4 of cpu and 1/16 of memory: 75 and floor(93.75) = 93 -> 84.
        ((4, 16), (0, 0), (1, 1), 84),
        # over-request scores 0 on that resource: cpu 0, mem 75 -> 37.
        ((4, 16), (4, 0), (1, 4), 37),
        # zero capacity scores 0 (guard), not a division error.
        ((0, 16), (0, 0), (1, 4), 37),
    ],
    ids=["half", "empty", "over-request", "zero-capacity"],
)
def test_least_allocated(alloc, req, pod, expected):
    with np.errstate(all="raise"):
        score = kubedefault.least_allocated_score(
            arr(req[0] + pod[0]), arr(req[1] + pod[1]), arr(alloc[0]), arr(alloc[1])
        )
    assert score.tolist() == [expected]


@pytest.mark.parametrize(
    ("alloc", "req", "pod", "expected"),
    [
        # fractions 0.5 and 0.5: std 0 -> 100.
        ((4, 16), (1, 4), (1, 4), 100),
        # fractions 0.5 and 0.25: std 0.125 -> 87.5 -> 87.
        ((4, 16), (1, 2), (1, 2), 87),
        # cpu fraction capped at 1, mem 0: std 0.5 -> 50.
        ((4, 16), (4, 0), (1, 0), 50),
    ],
    ids=["balanced", "skewed", "capped"],
)
def test_balanced_allocation(alloc, req, pod, expected):
    score = kubedefault.balanced_allocation_score(
        arr(req[0] + pod[0]), arr(req[1] + pod[1]), arr(alloc[0]), arr(alloc[1])
    )
    assert score.tolist() == [expected]


def test_default_scores_prefer_the_emptier_node():
    # emptier: least 75+93 -> 84, balanced |0.25-0.0625|/2 = 0.09375 -> 90 => 174;
    # fuller: least 50, balanced 100 => 150.
    scores = kubedefault.default_scores(arr(4, 4), arr(16, 16), arr(0, 1), arr(0, 4), 1, 1)
    assert scores.tolist()[0] > scores.tolist()[1]
