"""A model of the default kube-scheduler's resource plugins and node sampling (numpy, no Django).

Follows pkg/scheduler in kubernetes/kubernetes:
  * `num_feasible_nodes_to_find`: schedule_one.go `numFeasibleNodesToFind`
    (percentageOfNodesToScore; adaptive 50% - nodes/125, at least 5%, at least 100 nodes);
  * `least_allocated_score`: noderesources/least_allocated.go, cpu and memory weight 1;
  * `balanced_allocation_score`: noderesources/balanced_allocation.go (std of the fractions);
  * scores use the non-zero defaults of util/pod_resources.go for pods that request nothing.
No spot awareness: that is the point of comparing against it.
"""

from __future__ import annotations

import numpy as np

MAX_NODE_SCORE = 100
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(num_all_nodes: int, percentage: int = 0) -> int:
    """How many feasible nodes kube-scheduler looks for before it stops filtering (0 = adaptive)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage <= 0:
        percentage = 50 - num_all_nodes // 125
        percentage = max(percentage, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    if percentage >= 100:
        return num_all_nodes
    found = num_all_nodes * percentage // 100
    return max(found, MIN_FEASIBLE_NODES_TO_FIND)


def least_allocated_score(
    used_cpu: np.ndarray, used_mem: np.ndarray, alloc_cpu: np.ndarray, alloc_mem: np.ndarray
) -> np.ndarray:
    """LeastAllocated in [0, 100]: mean over cpu, memory of floor((cap - used) * 100 / cap).

    used = requested + pod; a resource with zero capacity or used > capacity scores 0
    (leastRequestedScore's guards).
    """
    return (_least_requested(used_cpu, alloc_cpu) + _least_requested(used_mem, alloc_mem)) // 2


def _least_requested(used: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """floor((capacity - used) * 100 / capacity); 0 when capacity is 0 or used exceeds it."""
    ok = (capacity > 0) & (used <= capacity)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.floor((capacity - used) * MAX_NODE_SCORE / np.where(capacity > 0, capacity, 1.0))
    return np.where(ok, value, 0.0).astype(np.int64)


def _fraction(used: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """used / capacity capped at 1; zero capacity counts as fraction 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(capacity > 0, used / np.where(capacity > 0, capacity, 1.0), 1.0)
    return np.minimum(fraction, 1.0)


def balanced_allocation_score(
    used_cpu: np.ndarray, used_mem: np.ndarray, alloc_cpu: np.ndarray, alloc_mem: np.ndarray
) -> np.ndarray:
    """BalancedAllocation in [0, 100]: floor((1 - std(cpu fraction, memory fraction)) * 100).

    Fractions are (requested + pod) / capacity capped at 1; for two resources the
    standard deviation is |f_cpu - f_mem| / 2.
    """
    std = np.abs(_fraction(used_cpu, alloc_cpu) - _fraction(used_mem, alloc_mem)) / 2.0
    return np.floor((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)


def default_scores(
    alloc_cpu: np.ndarray,
    alloc_mem: np.ndarray,
    req_cpu: np.ndarray,
    req_mem: np.ndarray,
    pod_cpu: float,
    pod_mem: float,
) -> np.ndarray:
    """The default profile's resource score: LeastAllocated + BalancedAllocation (weight 1 each)."""
    used_cpu, used_mem = req_cpu + pod_cpu, req_mem + pod_mem
    return least_allocated_score(
        used_cpu, used_mem, alloc_cpu, alloc_mem
    ) + balanced_allocation_score(used_cpu, used_mem, alloc_cpu, alloc_mem)
