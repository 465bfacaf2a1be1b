"""The replay's placement step compiled with numba: sampling, filter, score and best-score candidates.

Same rules, same arithmetic and same order of floating-point operations as
`Placer.choose_reference` (kube-scheduler's sampling plus `kubedefault.default_scores`
or `scoring.filter_matrix`/`scoring.score_matrix`), one node at a time instead of
one numpy call per step, and only over the sampled nodes. The replay has no GPUs,
so the GPU columns are not read. Ties are returned as a candidate list so the
caller draws from its own random generator exactly as before.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from scheduler.kubedefault import MAX_NODE_SCORE
from scheduler.scoring_kernel import balance_left, node_score

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
                                nxt = j + 1
                                if nxt == n:
                                    nxt = 0
                                return count, nxt
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
                nxt = i + 1
                if nxt == n:
                    nxt = 0
                return count, nxt
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
def _kiln_best(
    matrix, sample, count, cpu, mem, latency, w_cost, w_packing, w_risk, restart, score, feas
):  # pragma: no cover - compiled
    """Kiln's filter (spot guarantee, fit) and score per sampled machine; -> best score, -1 if none fits."""
    nfeas = 0
    cheapest = np.inf
    fallback = -np.inf
    any_nan = False
    asks = cpu > 0 or mem > 0
    for k in range(count):
        m = sample[k]
        p = matrix[m, 6]
        if p != p:
            any_nan = True
        elif p > fallback:
            fallback = p
        ok = True
        if latency and matrix[m, 8] > 0.5:
            ok = False
        elif matrix[m, 0] <= 0 or matrix[m, 1] <= 0:
            ok = False
        elif matrix[m, 3] + cpu > matrix[m, 0] or matrix[m, 4] + mem > matrix[m, 1]:
            ok = False
        feas[k] = ok
        if ok:
            nfeas += 1
    if nfeas == 0:
        return -1
    if fallback == -np.inf:
        fallback = 1.0
    # pass 1: each feasible machine's pod cost (price of the share it takes); the cheapest
    for k in range(count):
        if not feas[k]:
            continue
        m = sample[k]
        p = matrix[m, 6]
        if any_nan and p != p:
            p = fallback
        if asks:
            share = max(cpu / matrix[m, 0], mem / matrix[m, 1])
            c = p * share
        else:
            c = p
        score[k] = c  # cost kept here until pass 2
        if c < cheapest:
            cheapest = c
    best = -1
    for k in range(count):
        if not feas[k]:
            score[k] = -1
            continue
        m = sample[k]
        f_cpu = min((matrix[m, 3] + cpu) / matrix[m, 0], 1.0)
        f_mem = min((matrix[m, 4] + mem) / matrix[m, 1], 1.0)
        packing = 0.5 * ((f_cpu + f_mem) * 0.5) + 0.5 * balance_left(f_cpu, f_mem)
        s = node_score(
            cheapest,
            score[k],
            packing,
            matrix[m, 7],
            matrix[m, 8],
            restart,
            w_cost,
            w_packing,
            w_risk,
        )
        score[k] = s
        if s > best:
            best = s
    return best


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
    score,
    feas,
    candidates,
):  # pragma: no cover - compiled
    """One placement: -> number of best-scored candidates written to `candidates` (0: nothing fits).

    score_cpu/score_mem are what the default scorer counts (non-zero defaults applied);
    state[0] is the next start index, state[1] counts kiln's retries (both updated).
    """
    if need <= 0:
        return 0
    for _ in range(attempts):
        count, nxt = _sample(free_cpu, free_mem, bcpu, bmem, n, need, state[0], cpu, mem, sample)
        state[0] = nxt
        if count == 0:
            return 0
        if kiln:
            best = _kiln_best(
                matrix,
                sample,
                count,
                cpu,
                mem,
                latency,
                w_cost,
                w_packing,
                w_risk,
                restart,
                score,
                feas,
            )
            if best < 0:
                if count < need:
                    return 0
                found = False
                for b in range(bcpu.shape[0]):
                    if bcpu[b] < cpu or bmem[b] < mem:
                        continue
                    for i in range(b << BLOCK_SHIFT, min((b + 1) << BLOCK_SHIFT, n)):
                        if on_demand[i] and free_cpu[i] >= cpu and free_mem[i] >= mem:
                            found = True
                            break
                    if found:
                        break
                if not found:
                    return 0
                state[1] += 1
                continue
        else:
            best = _default_best(matrix, sample, count, score_cpu, score_mem, score)
        c = 0
        for k in range(count):
            if score[k] == best:
                candidates[c] = sample[k]
                c += 1
        return c
    return 0
