"""The replay's placement step compiled with numba: kube-scheduler's sampling, then the scorer under test.

Same rules and arithmetic as `Placer.choose_reference` (the numpy reference:
kube-scheduler's sampling plus `kubedefault.default_scores` or
`scoring.filter_nodes`/`scoring.score_nodes`), one node at a time and only over
the sampled machines. Kiln's filter and score are not written here: `choose`
gathers the sampled machines' rows and calls the extender's compiled kernel
(`scoring_kernel.filter_all`/`score_all`) on them. Ties are returned as a candidate list so the caller draws from
its own random generator.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from scheduler.kubedefault import MAX_NODE_SCORE
from scheduler.pools import REASON_SPREAD
from scheduler.scoring import FIT
from scheduler.scoring_kernel import filter_all, score_all

BLOCK_SHIFT = 6  # machines are grouped in blocks of 64 for the fit scan
BLOCK = 1 << BLOCK_SHIFT


def block_count(n: int) -> int:
    """How many scan blocks n machines make."""
    return (n + BLOCK - 1) >> BLOCK_SHIFT


@njit(cache=True, nogil=True)
def _sample(free_cpu, free_mem, bcpu, bmem, n, need, start, cpu, mem, out):  # pragma: no cover
    """First `need` machines from `start` (on the ring) whose free cpu and memory fit; -> (count, next start).

    bcpu/bmem hold an upper bound of each block's largest free cpu and memory: a
    block that cannot fit the request is skipped whole (no machine in it would
    pass), and a block scanned whole gets its exact maxima back.
    """
    count = 0
    i = start
    remaining = n
    while remaining > 0:
        if (i & (BLOCK - 1)) == 0:
            b = i >> BLOCK_SHIFT
            end = min(i + BLOCK, n)
            size = end - i
            if size <= remaining:
                if bcpu[b] >= cpu and bmem[b] >= mem:
                    top_c = -np.inf
                    top_m = -np.inf
                    for j in range(i, end):
                        fc = free_cpu[j]
                        fm = free_mem[j]
                        if fc > top_c:
                            top_c = fc
                        if fm > top_m:
                            top_m = fm
                        if fc >= cpu and fm >= mem:
                            out[count] = j
                            count += 1
                            if count == need:
                                return count, (j + 1) % n
                    bcpu[b] = top_c
                    bmem[b] = top_m
                i = end
                remaining -= size
                if i == n:
                    i = 0
                continue
        if free_cpu[i] >= cpu and free_mem[i] >= mem:
            out[count] = i
            count += 1
            if count == need:
                return count, (i + 1) % n
        i += 1
        remaining -= 1
        if i == n:
            i = 0
    return count, start


@njit(cache=True, nogil=True)
def _default_best(matrix, sample, count, cpu, mem, score):  # pragma: no cover - compiled
    """kube-scheduler's LeastAllocated + BalancedAllocation per sampled machine; -> best score."""
    best = -1
    for k in range(count):
        m = sample[k]
        cap_c = matrix[m, 0]
        cap_m = matrix[m, 1]
        used_c = matrix[m, 3] + cpu
        used_m = matrix[m, 4] + mem
        la_c = 0
        if cap_c > 0 and used_c <= cap_c:
            la_c = int(math.floor((cap_c - used_c) * MAX_NODE_SCORE / cap_c))
        la_m = 0
        if cap_m > 0 and used_m <= cap_m:
            la_m = int(math.floor((cap_m - used_m) * MAX_NODE_SCORE / cap_m))
        f_c = used_c / cap_c if cap_c > 0 else 1.0
        f_m = used_m / cap_m if cap_m > 0 else 1.0
        if f_c > 1.0:
            f_c = 1.0
        if f_m > 1.0:
            f_m = 1.0
        std = abs(f_c - f_m) / 2.0
        s = (la_c + la_m) // 2 + int(math.floor((1.0 - std) * MAX_NODE_SCORE))
        score[k] = s
        if s > best:
            best = s
    return best


@njit(cache=True, nogil=True)
def _any_acceptable_fits(
    free_cpu, free_mem, bcpu, bmem, on_demand, n, cpu, mem, pool_of, blocked, spot_ok
):  # pragma: no cover - compiled
    """Whether any machine of the whole cluster that Kiln's filter could pass has the free cpu and
    memory asked for: an on-demand one, or (`spot_ok`) a spot one whose capacity pool is not
    `blocked` for the task's workload."""
    for b in range(bcpu.shape[0]):
        if bcpu[b] < cpu or bmem[b] < mem:
            continue
        for i in range(b << BLOCK_SHIFT, min((b + 1) << BLOCK_SHIFT, n)):
            if free_cpu[i] >= cpu and free_mem[i] >= mem:
                if on_demand[i] or (spot_ok and not blocked[pool_of[i]]):
                    return True
    return False


@njit(cache=True, nogil=True)
def choose(
    free_cpu,
    free_mem,
    bcpu,
    bmem,
    matrix,
    on_demand,
    n,
    need,
    state,
    cpu,
    mem,
    score_cpu,
    score_mem,
    kiln,
    latency,
    attempts,
    w_cost,
    w_packing,
    w_risk,
    restart,
    sample,
    rows,
    usable,
    reasons,
    score,
    candidates,
    pool_of,
    blocked,
    spread,
):  # pragma: no cover - compiled
    """One placement: -> number of best-scored candidates written to `candidates` (0: nothing fits).

    score_cpu/score_mem are what the default scorer counts (non-zero defaults applied);
    state[0] is the next start index, state[1] counts kiln's retries (both updated).
    `rows` is a buffer for the sampled machines' rows; `usable` is all true (every
    sampled machine is a candidate for Kiln's filter).
    When Kiln's filter rejects the whole sample, the pod is retried from the next
    start index, unless every machine that fits was seen or none of them could pass.
    With `spread`, a sampled spot machine whose capacity pool (`pool_of`) is `blocked` for the
    task's workload fails Kiln's filter (`pools.REASON_SPREAD`): the capacity-pool filter.
    """
    if need <= 0:
        return 0
    for _ in range(attempts):
        count, nxt = _sample(free_cpu, free_mem, bcpu, bmem, n, need, state[0], cpu, mem, sample)
        state[0] = nxt
        if count == 0:
            return 0
        if kiln:
            for k in range(count):
                m = sample[k]
                rows[k] = matrix[m]
                usable[k] = not (spread and matrix[m, 8] > 0.5 and blocked[pool_of[m]])
            sampled = rows[:count]
            filter_all(sampled, usable, REASON_SPREAD, cpu, mem, 0.0, latency, reasons)
            best = score_all(
                sampled, reasons, cpu, mem, 0.0, w_cost, w_packing, w_risk, restart, score
            )
            if best < 0:
                if count < need:
                    return 0
                if not _any_acceptable_fits(
                    free_cpu,
                    free_mem,
                    bcpu,
                    bmem,
                    on_demand,
                    n,
                    cpu,
                    mem,
                    pool_of,
                    blocked,
                    spread and not latency,
                ):
                    return 0
                state[1] += 1
                continue
        else:
            best = _default_best(matrix, sample, count, score_cpu, score_mem, score)
        c = 0
        for k in range(count):
            if score[k] == best and (not kiln or reasons[k] == FIT):
                candidates[c] = sample[k]
                c += 1
        return c
    return 0
