"""Kiln's filter and score compiled with numba: the one kernel both the extender and the replay call.

The formulas are `scheduler/scoring.py`'s (`filter_nodes`, `cost_term`,
`packing_term`, `risk_term`, `score_nodes`) and are documented there; this
module computes them one node at a time, in one pass, with the same
floating-point operations in the same order, so its scores equal the
reference's exactly (tests hold the two equal over random clusters, GPUs,
unpriced and zero-capacity nodes included). `_max`/`_min` propagate NaN as
`np.maximum`/`np.minimum` do.

Kept for two measured targets (docs/scheduler.md): the extender's HTTP p99 <= 10 ms
at 12,477 nodes, and the replay of parts 0-13 of the Google trace in <= 120 s
per run (about 560 s per run with numpy calls per placement).

Callers name the rows to look at: `filter_at` and `score_at` take a matrix
and positions into it. The extender passes its candidates' rows and every
position (`filter_rows`, `score_rows`); the replay passes its whole cluster
and the machines kube-scheduler's sampling picked (`scheduler/replay/placement.py`).
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

# Columns of a row (scoring.NodeArrays.COLUMNS).
ALLOC_CPU, ALLOC_MEM, ALLOC_GPU, REQ_CPU, REQ_MEM, REQ_GPU, PRICE, INTERRUPTION, SPOT = range(9)


@njit(cache=True, nogil=True, inline="always")
def _max(a, b):  # pragma: no cover - compiled
    return a if (a != a or a >= b) else b


@njit(cache=True, nogil=True, inline="always")
def _min(a, b):  # pragma: no cover - compiled
    return a if (a != a or a <= b) else b


@njit(cache=True, nogil=True, inline="always")
def _reason(rows, m, cpu, mem, gpu, latency):  # pragma: no cover - compiled
    """`scoring.filter_nodes` for row m: the strongest reason wins (spot, zero capacity, cpu, memory, GPUs)."""
    if latency and rows[m, SPOT] > 0.5:
        return REASON_SPOT_LATENCY_SENSITIVE
    if rows[m, ALLOC_CPU] <= 0 or rows[m, ALLOC_MEM] <= 0:
        return REASON_ZERO_CAPACITY
    if rows[m, REQ_CPU] + cpu > rows[m, ALLOC_CPU]:
        return REASON_INSUFFICIENT_CPU
    if rows[m, REQ_MEM] + mem > rows[m, ALLOC_MEM]:
        return REASON_INSUFFICIENT_MEMORY
    if gpu > 0 and rows[m, REQ_GPU] + gpu > rows[m, ALLOC_GPU]:
        return REASON_INSUFFICIENT_GPU
    return FIT


@njit(cache=True, nogil=True, inline="always")
def _pod_cost(rows, m, price, cpu, mem, gpu):  # pragma: no cover - compiled
    """`scoring.cost_term`'s pod cost on feasible row m: price times the pod's dominant share."""
    if not (cpu > 0 or mem > 0 or gpu > 0):
        return price  # a pod asking for nothing is compared on the node price alone
    share = _max(cpu / rows[m, ALLOC_CPU], mem / rows[m, ALLOC_MEM])
    if gpu > 0:
        share = _max(share, gpu / rows[m, ALLOC_GPU])
    return price * share


@njit(cache=True, nogil=True, inline="always")
def _packing(rows, m, cpu, mem, gpu):  # pragma: no cover - compiled
    """`scoring.packing_term` (with `balance_after` and the GPU-stranding factor) for feasible row m."""
    f_cpu = _min((rows[m, REQ_CPU] + cpu) / rows[m, ALLOC_CPU], 1.0)
    f_mem = _min((rows[m, REQ_MEM] + mem) / rows[m, ALLOC_MEM], 1.0)
    left_cpu = 1.0 - f_cpu
    left_mem = 1.0 - f_mem
    most = _max(left_cpu, left_mem)
    balance = _min(left_cpu, left_mem) / most if most > 0 else 1.0
    gpus = rows[m, ALLOC_GPU]
    if gpu > 0:
        fill = (f_cpu + f_mem + _min((rows[m, REQ_GPU] + gpu) / gpus, 1.0)) / 3.0
        return 0.5 * fill + 0.5 * balance
    packing = 0.5 * ((f_cpu + f_mem) * 0.5) + 0.5 * balance
    if gpus > 0:
        stranded = _min(_max(gpus - rows[m, REQ_GPU], 0.0) / gpus, 1.0)
        packing = packing * (1.0 - stranded)
    return packing


@njit(cache=True, nogil=True, inline="always")
def _risk(rows, m, restart):  # pragma: no cover - compiled
    """`scoring.risk_term` for row m: interruption likelihood (worst if unknown) times restart cost."""
    likelihood = rows[m, INTERRUPTION]
    if likelihood != likelihood:
        likelihood = UNKNOWN_SPOT_LIKELIHOOD
    risk = _min(_max(likelihood, 0.0), 1.0) * (1.0 if rows[m, SPOT] > 0.5 else 0.0)
    risk *= restart
    return risk


@njit(cache=True, nogil=True, inline="always")
def _node_score(cheapest, cost, packing, risk, w_cost, w_packing, w_risk):  # pragma: no cover
    """`scoring.score_nodes` for one feasible node: the weighted terms as an integer in 0..10."""
    if cheapest > 0:
        cost_score = cheapest / cost
    else:
        cost_score = 1.0 if cost <= 0 else 0.0  # free capacity: free nodes best, priced ones 0
    total = w_cost * cost_score
    total += w_packing * _max(packing, 0.0)
    total += w_risk * (1.0 - risk)
    total = _min(_max(total, 0.0), 1.0)
    total *= MAX_EXTENDER_PRIORITY
    total += 0.5
    return math.floor(total)


@njit(cache=True, nogil=True)
def filter_at(rows, at, count, usable, unusable, cpu, mem, gpu, latency, out):  # pragma: no cover
    """out[k] = the filter reason of row at[k] for k < count; `unusable` where usable[k] is false."""
    for k in range(count):
        out[k] = _reason(rows, at[k], cpu, mem, gpu, latency) if usable[k] else unusable


@njit(cache=True, nogil=True)
def score_at(
    rows, at, count, reasons, cpu, mem, gpu, w_cost, w_packing, w_risk, restart, out
):  # pragma: no cover - compiled
    """out[k] = the score (0..10) of row at[k], 0 where reasons[k] is not FIT; -> best FIT score, -1 if none.

    Cost is compared over the feasible rows only; an unpriced row costs the
    highest price among the rows looked at (1.0 if none is priced).
    """
    feasible = 0
    fallback = -np.inf
    for k in range(count):
        out[k] = 0
        price = rows[at[k], PRICE]
        if price == price:
            fallback = _max(fallback, price)
        if reasons[k] == FIT:
            feasible += 1
    if feasible == 0:
        return -1
    if fallback == -np.inf:
        fallback = 1.0
    cheapest = np.inf
    first = True
    for k in range(count):
        if reasons[k] == FIT:
            m = at[k]
            price = rows[m, PRICE]
            cost = _pod_cost(rows, m, price if price == price else fallback, cpu, mem, gpu)
            cheapest = cost if first else _min(cheapest, cost)
            first = False
    best = -1
    for k in range(count):
        if reasons[k] == FIT:
            m = at[k]
            price = rows[m, PRICE]
            cost = _pod_cost(rows, m, price if price == price else fallback, cpu, mem, gpu)
            score = _node_score(
                cheapest,
                cost,
                _packing(rows, m, cpu, mem, gpu),
                _risk(rows, m, restart),
                w_cost,
                w_packing,
                w_risk,
            )
            out[k] = score
            best = max(best, score)
    return best


_positions = np.arange(0, dtype=np.int64)


def all_positions(n: int) -> np.ndarray:
    """0, 1, ..., at least n-1: every row of a matrix, as positions for `filter_at`/`score_at`."""
    global _positions
    if _positions.shape[0] < n:
        _positions = np.arange(max(n, 2 * _positions.shape[0]), dtype=np.int64)
    return _positions


def is_latency_sensitive(workload_class: str) -> bool:
    """Whether the spot guarantee applies: every class but standard and batch."""
    return workload_class not in (STANDARD, BATCH)


def restart_cost(workload_class: str) -> float:
    """What one interruption costs a pod of this class (`scoring.RESTART_COST`)."""
    return RESTART_COST.get(workload_class, RESTART_COST[LATENCY_SENSITIVE])


def filter_rows(
    rows: np.ndarray, pod: PodRequest, usable: np.ndarray | None = None, unusable: int = 0
) -> np.ndarray:
    """`scoring.filter_matrix` (int8 reasons); positions not `usable` get the reason `unusable`."""
    n = rows.shape[0]
    out = np.empty(n, dtype=np.int8)
    if usable is None:
        usable = np.ones(n, dtype=np.bool_)
    latency = is_latency_sensitive(pod.workload_class)
    filter_at(
        rows, all_positions(n), n, usable, unusable, pod.cpu, pod.memory, pod.gpu, latency, out
    )
    return out


def score_rows(
    rows: np.ndarray, pod: PodRequest, weights: Weights, reasons: np.ndarray
) -> np.ndarray:
    """`scoring.score_nodes` over rows: int64 scores in [0, 10], 0 where the reason is not FIT."""
    n = rows.shape[0]
    out = np.empty(n, dtype=np.int64)
    score_at(
        rows,
        all_positions(n),
        n,
        reasons,
        pod.cpu,
        pod.memory,
        pod.gpu,
        weights.cost,
        weights.packing,
        weights.risk,
        restart_cost(pod.workload_class),
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
