"""Kiln's filter and score compiled with numba: the one kernel both the extender and the replay call.

The formulas are `scheduler/scoring.py`'s (`filter_nodes`, `cost_term`,
`packing_term`, `risk_term`, `score_nodes`) and are documented there; this
module computes them one node at a time, in one pass, with the same
floating-point operations in the same order, so its scores equal the
reference's exactly (tests hold the two equal over random clusters, GPUs,
unpriced and zero-capacity nodes included). `_max`/`_min` propagate NaN as
`np.maximum`/`np.minimum` do.

Kept for two measured targets (docs/scheduler.md): the replay of parts 0-13 of the
Google trace in <= 120 s per run, and the extender's HTTP p99 <= 10 ms at 12,477
nodes and <= 2 ms at 623. Alternated with and without it on the shared machine
(docs/operations.md#speed-machinery-what-earned-its-place): the replay's numpy
reference took 2.89 times the CPU of the compiled step on part 0 (7.89 against
2.73 s, `bench/results/scheduler_replay-compiled-2026-12-06.json`), which puts
parts 0-13 (66.7 CPU s compiled) near 190 s; the extender with the numpy reference
(`KILN_SCHEDULER_COMPILED_KERNEL=0`) spent 1.33 and 1.45 times the CPU per pair
(p50, 12,477 and 623 names, `bench/results/extender_bench-kernel-*-2026-12-06.json`).

Both callers hand over the rows to look at, one per node: the extender its
candidates' rows (`filter_rows`, `score_rows`), the replay the machines
kube-scheduler's sampling picked, gathered into a buffer inside its compiled
placement step (`scheduler/replay/placement.py` calls `filter_all`/`score_all`).
Gathering costs the replay a copy of 9 numbers per sampled machine; indexing
through a positions array instead made the extender's score pass 1.5x slower.
"""

from __future__ import annotations

import math
import os

import numpy as np
from numba import njit

from scheduler import scoring
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

# KILN_SCHEDULER_COMPILED_KERNEL=0: the extender's filter_rows/score_rows run the numpy
# reference instead (to compare: `extender_bench`).
COMPILED = os.environ.get("KILN_SCHEDULER_COMPILED_KERNEL", "1") != "0"


@njit(cache=True, nogil=True, inline="always")
def _max(a, b):  # pragma: no cover - compiled
    return a if (a != a or a >= b) else b


@njit(cache=True, nogil=True, inline="always")
def _min(a, b):  # pragma: no cover - compiled
    return a if (a != a or a <= b) else b


@njit(cache=True, nogil=True, inline="always")
def _balance(f_cpu, f_mem):  # pragma: no cover - compiled
    """`scoring.balance_after`: the smaller share left over the larger (1 when nothing is left)."""
    left_cpu = 1.0 - f_cpu
    left_mem = 1.0 - f_mem
    most = _max(left_cpu, left_mem)
    return _min(left_cpu, left_mem) / most if most > 0 else 1.0


@njit(cache=True, nogil=True, inline="always")
def _node_score(
    cheapest, cost, packing, likelihood, spot, restart, w_cost, w_packing, w_risk
):  # pragma: no cover - compiled
    """`scoring.score_nodes` for one feasible node: cost, packing and risk weighted into 0..10."""
    if cheapest > 0:
        cost_score = cheapest / cost
    else:
        cost_score = 1.0 if cost <= 0 else 0.0  # free capacity: free nodes best, priced ones 0
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
def filter_all(rows, usable, unusable, cpu, mem, gpu, latency, out):  # pragma: no cover
    """`scoring.filter_nodes` per row into out; the strongest reason wins; `unusable` where not usable."""
    for i in range(rows.shape[0]):
        alloc_cpu = rows[i, 0]
        alloc_mem = rows[i, 1]
        if not usable[i]:
            reason = unusable
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
def score_all(
    rows, reasons, cpu, mem, gpu, w_cost, w_packing, w_risk, restart, out
):  # pragma: no cover - compiled
    """`scoring.score_nodes` per row into out (0 where the reason is not FIT); -> best FIT score, -1 if none.

    Cost is compared over the feasible rows only; an unpriced row costs the
    highest price among all rows (1.0 if none is priced), as `effective_prices`.
    """
    n = rows.shape[0]
    feasible = 0
    fallback = -np.inf
    for i in range(n):
        out[i] = 0
        price = rows[i, 6]
        if price == price:
            fallback = _max(fallback, price)
        if reasons[i] == FIT:
            feasible += 1
    if feasible == 0:
        return -1
    if fallback == -np.inf:
        fallback = 1.0
    asks = cpu > 0 or mem > 0 or gpu > 0
    # Pass 1 (cost_term): each feasible node's pod cost, the price of the share it takes.
    costs = np.empty(n)
    cheapest = np.inf
    first = True
    for i in range(n):
        if reasons[i] != FIT:
            continue
        price = rows[i, 6]
        if price != price:
            price = fallback
        if asks:
            share = _max(cpu / rows[i, 0], mem / rows[i, 1])
            if gpu > 0:
                share = _max(share, gpu / rows[i, 2])
            cost = price * share
        else:
            cost = price  # a pod asking for nothing is compared on the node price alone
        costs[i] = cost
        cheapest = cost if first else _min(cheapest, cost)
        first = False
    # Pass 2 (packing_term, then the weighted score): half fill, half balance, GPU stranding.
    best = -1
    for i in range(n):
        if reasons[i] != FIT:
            continue
        f_cpu = _min((rows[i, 3] + cpu) / rows[i, 0], 1.0)
        f_mem = _min((rows[i, 4] + mem) / rows[i, 1], 1.0)
        balance = _balance(f_cpu, f_mem)
        gpus = rows[i, 2]
        if gpu > 0:
            fill = (f_cpu + f_mem + _min((rows[i, 5] + gpu) / gpus, 1.0)) / 3.0
            packing = 0.5 * fill + 0.5 * balance
        else:
            packing = 0.5 * ((f_cpu + f_mem) * 0.5) + 0.5 * balance
            if gpus > 0:
                stranded = _min(_max(gpus - rows[i, 5], 0.0) / gpus, 1.0)
                packing = packing * (1.0 - stranded)
        score = _node_score(
            cheapest, costs[i], packing, rows[i, 7], rows[i, 8], restart, w_cost, w_packing, w_risk
        )
        out[i] = score
        if score > best:
            best = score
    return best


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
    if not COMPILED:
        reasons = scoring.filter_matrix(rows, pod)
        return reasons if usable is None else np.where(usable, reasons, unusable).astype(np.int8)
    n = rows.shape[0]
    out = np.empty(n, dtype=np.int8)
    if usable is None:
        usable = np.ones(n, dtype=np.bool_)
    latency = is_latency_sensitive(pod.workload_class)
    filter_all(rows, usable, unusable, pod.cpu, pod.memory, pod.gpu, latency, out)
    return out


def score_rows(
    rows: np.ndarray, pod: PodRequest, weights: Weights, reasons: np.ndarray
) -> np.ndarray:
    """`scoring.score_nodes` over rows: int64 scores in [0, 10], 0 where the reason is not FIT."""
    if not COMPILED:
        return scoring.score_matrix(rows, pod, weights, reasons)
    n = rows.shape[0]
    out = np.empty(n, dtype=np.int64)
    score_all(
        rows,
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
