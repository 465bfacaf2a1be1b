"""The extender's filter and score compiled with numba: one pass per node instead of one numpy call per step.

Same rules, same arithmetic and same order of floating-point operations as
`scoring.filter_matrix` and `scoring.score_matrix` (GPUs included); tests hold
the two equal over random clusters. `np.maximum`/`np.minimum` propagate NaN and
so do `_max`/`_min` here.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from scheduler.scoring import (
    BATCH,
    FIT,
    LATENCY_SENSITIVE,
    MAX_EXTENDER_PRIORITY,
    REASON_INSUFFICIENT_CPU,
    REASON_INSUFFICIENT_GPU,
    REASON_INSUFFICIENT_MEMORY,
    REASON_SPOT_LATENCY_SENSITIVE,
    REASON_ZERO_CAPACITY,
    RESTART_COST,
    STANDARD,
    UNKNOWN_SPOT_LIKELIHOOD,
    PodRequest,
    Weights,
)


@njit(cache=True, nogil=True, inline="always")
def _max(a, b):  # pragma: no cover - compiled
    return a if (a != a or a >= b) else b


@njit(cache=True, nogil=True, inline="always")
def _min(a, b):  # pragma: no cover - compiled
    return a if (a != a or a <= b) else b


@njit(cache=True, nogil=True, inline="always")
def balance_left(f_cpu, f_mem):  # pragma: no cover - compiled
    """What stays usable of the larger free resource once the pod is placed: the smaller share
    left over the larger (1 when nothing is left of either)."""
    left_cpu = 1.0 - f_cpu
    left_mem = 1.0 - f_mem
    most = _max(left_cpu, left_mem)
    return _min(left_cpu, left_mem) / most if most > 0 else 1.0


@njit(cache=True, nogil=True, inline="always")
def node_score(
    cheapest, cost, packing, likelihood, spot, restart, w_cost, w_packing, w_risk
):  # pragma: no cover - compiled
    """The 0-10 extender score of one feasible node from its cost, packing and preemption risk;
    shared by the extender and the replay, so both score exactly alike."""
    if cheapest > 0:
        cost_score = cheapest / cost
    else:
        cost_score = 1.0 if cost <= 0 else 0.0
    if likelihood != likelihood:
        likelihood = UNKNOWN_SPOT_LIKELIHOOD
    risk = _min(_max(likelihood, 0.0), 1.0) * (1.0 if spot > 0.5 else 0.0)
    risk *= restart
    total = w_cost * cost_score
    total += w_packing * _max(packing, 0.0)
    total += w_risk * (1.0 - risk)
    total = _min(_max(total, 0.0), 1.0)
    total *= MAX_EXTENDER_PRIORITY
    total += 0.5
    return math.floor(total)


@njit(cache=True, nogil=True)
def _filter(rows, usable, unusable_reason, cpu, mem, gpu, latency, out):  # pragma: no cover
    """Per-node reason; the strongest wins: spot guarantee, zero capacity, cpu, memory, GPUs."""
    for i in range(rows.shape[0]):
        alloc_cpu = rows[i, 0]
        alloc_mem = rows[i, 1]
        if not usable[i]:
            reason = unusable_reason
        elif latency and rows[i, 8] > 0.5:
            reason = REASON_SPOT_LATENCY_SENSITIVE
        elif alloc_cpu <= 0 or alloc_mem <= 0:
            reason = REASON_ZERO_CAPACITY
        elif rows[i, 3] + cpu > alloc_cpu:
            reason = REASON_INSUFFICIENT_CPU
        elif rows[i, 4] + mem > alloc_mem:
            reason = REASON_INSUFFICIENT_MEMORY
        elif gpu > 0 and rows[i, 5] + gpu > rows[i, 2]:
            reason = REASON_INSUFFICIENT_GPU
        else:
            reason = FIT
        out[i] = reason


@njit(cache=True, nogil=True)
def _score(
    rows, reasons, cpu, mem, gpu, w_cost, w_packing, w_risk, restart, out
):  # pragma: no cover
    """`score_matrix` one node at a time; out[i] = 0 for nodes that do not pass."""
    n = rows.shape[0]
    nfeas = 0
    feasible_nan = False
    fallback = -np.inf
    any_known = False
    for i in range(n):
        out[i] = 0
        p = rows[i, 6]
        if p == p:
            any_known = True
            fallback = _max(fallback, p)
        if reasons[i] == FIT:
            nfeas += 1
            if p != p:
                feasible_nan = True
    if nfeas == 0:
        return
    if not any_known:
        fallback = 1.0
    asks = cpu > 0 or mem > 0 or gpu > 0
    # pass 1: each feasible node's pod cost (the price of the share it takes); the cheapest
    costs = np.empty(n)
    cheapest = np.inf
    first = True
    for i in range(n):
        if reasons[i] != FIT:
            continue
        price = rows[i, 6]
        if feasible_nan and price != price:
            price = fallback
        if asks:
            share = _max(cpu / rows[i, 0], mem / rows[i, 1])
            if gpu > 0:
                share = _max(share, gpu / rows[i, 2])
            cost = price * share
        else:
            cost = price
        costs[i] = cost
        cheapest = cost if first else _min(cheapest, cost)
        first = False
    for i in range(n):
        if reasons[i] != FIT:
            continue
        f_cpu = _min((rows[i, 3] + cpu) / rows[i, 0], 1.0)
        f_mem = _min((rows[i, 4] + mem) / rows[i, 1], 1.0)
        balance = balance_left(f_cpu, f_mem)
        gpus = rows[i, 2]
        if gpu > 0:
            fill = (f_cpu + f_mem + _min((rows[i, 5] + gpu) / gpus, 1.0)) / 3.0
            packing = 0.5 * fill + 0.5 * balance
        else:
            packing = 0.5 * ((f_cpu + f_mem) * 0.5) + 0.5 * balance
            if gpus > 0:
                stranded = _min(_max(gpus - rows[i, 5], 0.0) / gpus, 1.0)
                packing = packing * (1.0 - stranded)
        out[i] = node_score(
            cheapest, costs[i], packing, rows[i, 7], rows[i, 8], restart, w_cost, w_packing, w_risk
        )


def _latency(pod: PodRequest) -> bool:
    return pod.workload_class not in (STANDARD, BATCH)


def filter_rows(
    rows: np.ndarray, pod: PodRequest, usable: np.ndarray | None = None, unusable: int = 0
) -> np.ndarray:
    """`scoring.filter_matrix` (int8 reasons); positions not `usable` get the reason `unusable`."""
    out = np.empty(rows.shape[0], dtype=np.int8)
    if usable is None:
        usable = np.ones(rows.shape[0], dtype=np.bool_)
    _filter(rows, usable, unusable, pod.cpu, pod.memory, pod.gpu, _latency(pod), out)
    return out


def score_rows(
    rows: np.ndarray, pod: PodRequest, weights: Weights, reasons: np.ndarray
) -> np.ndarray:
    """`scoring.score_matrix`: int64 scores in [0, 10], 0 where the reason is not FIT."""
    out = np.empty(rows.shape[0], dtype=np.int64)
    restart = RESTART_COST.get(pod.workload_class, RESTART_COST[LATENCY_SENSITIVE])
    _score(
        rows,
        reasons,
        pod.cpu,
        pod.memory,
        pod.gpu,
        weights.cost,
        weights.packing,
        weights.risk,
        restart,
        out,
    )
    return out


def warm_up() -> None:
    """Compile (or load from numba's cache) both kernels, for read-only and writable rows."""
    rows = np.array([[4, 16, 1, 1, 1, 0, 0.1, np.nan, 1]], dtype=np.float64)
    for matrix in (rows, rows.copy()):
        if matrix is not rows:
            matrix.flags.writeable = False
        for pod in (PodRequest(1, 1, 0, STANDARD), PodRequest(1, 1, 1, LATENCY_SENSITIVE)):
            score_rows(matrix, pod, Weights(), filter_rows(matrix, pod))
