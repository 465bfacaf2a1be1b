"""Kiln's scoring engine: filter and score every candidate node at once (numpy, no Django).

Inputs are column arrays over nodes (`NodeArrays`) and one pod (`PodRequest`);
units only have to agree between nodes and pod (cores and bytes in the
extender, normalised trace units in the replay).

Filter (reasons are constants, never bools):
  * the spot guarantee: a latency-sensitive pod (label `kiln.dev/workload-class`
    `latency-sensitive`, missing or unknown) sees every spot node as
    unschedulable, and that reason is *unresolvable* (preemption cannot undo it);
  * resource fit: requested + pod <= allocatable for cpu, memory and GPUs;
  * zero capacity: a node without allocatable cpu or memory fits nothing.

Score (each term in [0, 1], then weighted; weights sum to 1):
  score = round(10 * (w_cost * cost + w_packing * packing + w_risk * (1 - risk)))
so every score is an integer in [0, 10] (`MaxExtenderPriority`). Packing rewards
filling the node and penalises stranding: half fill, half cpu/memory balance of
what is left after placement, times the share of the node's GPUs in use when the
pod asks for none (`packing_term`).

These functions are the formulas and the reference. The extender's and the
replay's hot paths run `scheduler/scoring_kernel.py`, which computes the same
terms compiled, node by node; tests hold its scores equal to `score_nodes`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

MAX_EXTENDER_PRIORITY = 10

WORKLOAD_CLASS_LABEL = "kiln.dev/workload-class"
LATENCY_SENSITIVE = "latency-sensitive"
STANDARD = "standard"
BATCH = "batch"
WORKLOAD_CLASSES = (LATENCY_SENSITIVE, STANDARD, BATCH)

# What one interruption costs a pod of each class, in [0, 1]: a latency-sensitive
# service loses requests and its warm state; batch work just re-runs a chunk.
RESTART_COST: dict[str, float] = {LATENCY_SENSITIVE: 1.0, STANDARD: 0.5, BATCH: 0.1}

# Spot interruption-frequency buckets (the five bands of the AWS Spot Instance
# Advisor: interruptions per month) and the likelihood in [0, 1] Kiln assigns each:
# the band's midpoint (2.5%, 7.5%, 12.5%, 17.5%, 25%) divided by the top one's.
INTERRUPTION_BUCKETS: tuple[tuple[str, float], ...] = (
    ("<5%", 0.1),
    ("5-10%", 0.3),
    ("10-15%", 0.5),
    ("15-20%", 0.7),
    (">20%", 1.0),
)
UNKNOWN_SPOT_LIKELIHOOD = 1.0  # a spot node with no bucket is assumed the worst

# Filter reasons. FIT means the node passes.
FIT = 0
REASON_SPOT_LATENCY_SENSITIVE = 1
REASON_ZERO_CAPACITY = 2
REASON_INSUFFICIENT_CPU = 3
REASON_INSUFFICIENT_MEMORY = 4
REASON_INSUFFICIENT_GPU = 5
REASON_MESSAGES: dict[int, str] = {
    REASON_SPOT_LATENCY_SENSITIVE: "node is spot capacity and the pod is latency-sensitive",
    REASON_ZERO_CAPACITY: "node has no allocatable cpu or memory",
    REASON_INSUFFICIENT_CPU: "Insufficient cpu",
    REASON_INSUFFICIENT_MEMORY: "Insufficient memory",
    REASON_INSUFFICIENT_GPU: "Insufficient nvidia.com/gpu",
}
# Reasons preemption cannot resolve: they go to FailedAndUnresolvableNodes.
UNRESOLVABLE_REASONS = frozenset({REASON_SPOT_LATENCY_SENSITIVE, REASON_ZERO_CAPACITY})


class WeightsError(ValueError):
    """The score weights are not three finite numbers in [0, 1] summing to 1."""


@dataclass(frozen=True)
class Weights:
    """Weights of the cost, packing and risk terms; each in [0, 1], summing to 1."""

    cost: float = 0.5
    packing: float = 0.3
    risk: float = 0.2

    def __post_init__(self) -> None:
        values = {"cost": self.cost, "packing": self.packing, "risk": self.risk}
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise WeightsError(f"weight {name} must be a number, not {value!r}")
            if not math.isfinite(value) or not 0.0 <= value <= 1.0:
                raise WeightsError(f"weight {name} must be within [0, 1], not {value!r}")
        total = sum(values.values())
        if abs(total - 1.0) > 1e-6:
            raise WeightsError(f"weights must sum to 1, not {total:g}")


@dataclass(frozen=True)
class PodRequest:
    """What one pod asks for (cpu, memory, GPUs in the nodes' units) and its workload class."""

    cpu: float
    memory: float
    gpu: float = 0.0
    workload_class: str = LATENCY_SENSITIVE


@dataclass
class NodeArrays:
    """Column arrays over N nodes; `price` NaN means unpriced, `interruption` NaN means unknown."""

    alloc_cpu: np.ndarray
    alloc_mem: np.ndarray
    alloc_gpu: np.ndarray
    req_cpu: np.ndarray
    req_mem: np.ndarray
    req_gpu: np.ndarray
    price: np.ndarray
    interruption: np.ndarray
    spot: np.ndarray

    COLUMNS = (
        "alloc_cpu",
        "alloc_mem",
        "alloc_gpu",
        "req_cpu",
        "req_mem",
        "req_gpu",
        "price",
        "interruption",
        "spot",
    )

    def __len__(self) -> int:
        return int(self.alloc_cpu.shape[0])

    @classmethod
    def from_matrix(cls, matrix: np.ndarray) -> NodeArrays:
        """View an (N, 9) float matrix whose columns follow `COLUMNS` as NodeArrays (no copy)."""
        return cls(*(matrix[:, i] for i in range(8)), matrix[:, 8] > 0.5)

    def to_matrix(self) -> np.ndarray:
        """Stack the columns into one (N, 9) float64 matrix (see `from_matrix`)."""
        return np.column_stack(
            [np.asarray(getattr(self, c), dtype=np.float64) for c in self.COLUMNS]
        )


def workload_class_of(labels: Mapping[str, str] | None) -> str:
    """The pod's workload class from its labels; missing or unknown means latency-sensitive."""
    value = (labels or {}).get(WORKLOAD_CLASS_LABEL)
    return value if value in WORKLOAD_CLASSES else LATENCY_SENSITIVE


def effective_prices(price: np.ndarray) -> np.ndarray:
    """Fail-safe prices: an unpriced (NaN) node costs the highest known price (1.0 if none is known)."""
    price = np.asarray(price, dtype=np.float64)
    known = ~np.isnan(price)
    if known.all():
        return price
    fallback = float(price[known].max()) if known.any() else 1.0
    return np.where(known, price, fallback)


def filter_nodes(nodes: NodeArrays, pod: PodRequest) -> np.ndarray:
    """Per-node filter reason (int8, FIT = passes); the spot guarantee takes precedence over fit."""
    reasons = np.zeros(len(nodes), dtype=np.int8)
    # Assigned from the weakest to the strongest reason so the strongest one wins.
    if pod.gpu > 0:
        reasons[nodes.req_gpu + pod.gpu > nodes.alloc_gpu] = REASON_INSUFFICIENT_GPU
    reasons[nodes.req_mem + pod.memory > nodes.alloc_mem] = REASON_INSUFFICIENT_MEMORY
    reasons[nodes.req_cpu + pod.cpu > nodes.alloc_cpu] = REASON_INSUFFICIENT_CPU
    reasons[(nodes.alloc_cpu <= 0) | (nodes.alloc_mem <= 0)] = REASON_ZERO_CAPACITY
    if pod.workload_class not in (STANDARD, BATCH):
        reasons[nodes.spot] = REASON_SPOT_LATENCY_SENSITIVE
    return reasons


def _safe_ratio(numerator: np.ndarray | float, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, +inf where the denominator is zero or negative (zero-capacity guard)."""
    denominator = np.asarray(denominator, dtype=np.float64)
    out = np.full(denominator.shape, np.inf)
    return np.divide(numerator, denominator, out=out, where=denominator > 0)


def dominant_share(nodes: NodeArrays, pod: PodRequest) -> np.ndarray:
    """The pod's largest share of a node's allocatable cpu, memory or GPUs (inf on zero capacity)."""
    share = np.maximum(
        _safe_ratio(pod.cpu, nodes.alloc_cpu), _safe_ratio(pod.memory, nodes.alloc_mem)
    )
    if pod.gpu > 0:
        share = np.maximum(share, _safe_ratio(pod.gpu, nodes.alloc_gpu))
    return share


def pod_hourly_cost(price: np.ndarray, share: np.ndarray) -> np.ndarray:
    """What the pod costs on each node, in $/h: node price/h * dominant share (inf on zero capacity).

    A pod that asks for nothing (share 0) is costed at the whole node price.
    """
    price = np.asarray(price, dtype=np.float64)
    share = np.where(share > 0, share, 1.0)
    return np.multiply(price, share, out=np.full(share.shape, np.inf), where=np.isfinite(share))


def cheapest_pod_cost(cost: np.ndarray, feasible: np.ndarray | None = None) -> float | None:
    """The lowest finite pod cost ($/h) over `feasible` nodes (all when None); None if there is none."""
    pool = np.isfinite(cost) if feasible is None else np.isfinite(cost) & feasible
    return float(cost[pool].min()) if pool.any() else None


def cost_term(
    price: np.ndarray, share: np.ndarray, feasible: np.ndarray | None = None
) -> np.ndarray:
    """Cost score in [0, 1]: cheapest pod cost / this node's pod cost, pod cost = price/h * share.

    The pod's cost on a node is the hourly price of the share it takes
    (`pod_hourly_cost`). 1.0 for the cheapest candidate, 0.5 for one twice as
    dear, 0 for an infinite cost; two nodes with the same price per core (an
    xlarge at twice a large's price) cost a pod the same and score alike.
    The cheapest is taken over `feasible` nodes only (all when None).
    """
    cost = pod_hourly_cost(price, share)
    finite = np.isfinite(cost)
    cheapest = cheapest_pod_cost(cost, feasible)
    if cheapest is None:
        return np.zeros_like(cost)
    if cheapest <= 0:
        # Free capacity: free nodes are best (1.0), every priced node scores 0.
        return np.where(cost <= 0, 1.0, 0.0)
    out = np.zeros_like(cost)
    # A cost tiny beside the cheapest (a node outside `feasible` may cost less) can overflow to
    # inf; the cap below makes it 1.0, as for any node at most the cheapest's cost.
    with np.errstate(over="ignore"):
        ratio = np.divide(cheapest, cost, out=out, where=finite & (cost > 0))
    return np.minimum(ratio, 1.0)


def balance_after(cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
    """How little of a node's free capacity is stranded, in [0, 1], from its cpu and memory fractions.

    Left after placement: 1 - cpu and 1 - mem of allocatable. Of the larger of
    the two, only as much as the smaller can be used by pods that need both, so
    balance = min(left) / max(left): 1 when the node has as much cpu as memory
    left (or nothing left at all), 0 when one is used up and the other is not.
    """
    left_cpu = 1.0 - cpu
    left_mem = 1.0 - mem
    most = np.maximum(left_cpu, left_mem)
    least = np.minimum(left_cpu, left_mem)
    return np.divide(least, most, out=np.ones_like(most), where=most > 0)


@dataclass(frozen=True)
class PackingParts:
    """The inputs of `packing_term` per node, each in [0, 1], and the term itself (`value`).

    `cpu`, `memory` (and `gpu` when the pod asks for GPUs, else None) are the node's fill
    after placement; `balance` is `balance_after`; `stranded_gpu` the share of the node's
    GPUs a GPU-less pod leaves idle; `zero` marks zero-capacity nodes (packing 0).
    """

    cpu: np.ndarray
    memory: np.ndarray
    gpu: np.ndarray | None
    balance: np.ndarray
    stranded_gpu: np.ndarray
    zero: np.ndarray
    value: np.ndarray


def packing_parts(nodes: NodeArrays, pod: PodRequest) -> PackingParts:
    """`packing_term` with its inputs: fill per resource, balance and stranded GPU share."""
    cpu = np.minimum(_safe_ratio(nodes.req_cpu + pod.cpu, nodes.alloc_cpu), 1.0)
    mem = np.minimum(_safe_ratio(nodes.req_mem + pod.memory, nodes.alloc_mem), 1.0)
    balance = balance_after(cpu, mem)
    zero = (nodes.alloc_cpu <= 0) | (nodes.alloc_mem <= 0)
    gpu = None
    stranded = np.zeros(len(nodes))
    if pod.gpu > 0:
        gpu = np.minimum(_safe_ratio(nodes.req_gpu + pod.gpu, nodes.alloc_gpu), 1.0)
        packing = 0.5 * ((cpu + mem + gpu) / 3.0) + 0.5 * balance
        zero |= nodes.alloc_gpu <= 0
    else:
        packing = 0.5 * ((cpu + mem) * 0.5) + 0.5 * balance
        has_gpu = nodes.alloc_gpu > 0
        if has_gpu.any():
            free = np.maximum(nodes.alloc_gpu - nodes.req_gpu, 0.0)
            stranded = np.minimum(
                np.divide(free, nodes.alloc_gpu, out=np.zeros_like(free), where=has_gpu), 1.0
            )
            packing = packing * (1.0 - stranded)
    value = np.where(zero, 0.0, np.maximum(packing, 0.0))
    return PackingParts(cpu, mem, gpu, balance, stranded, zero, value)


def packing_term(nodes: NodeArrays, pod: PodRequest) -> np.ndarray:
    """Packing score in [0, 1]: (fill + balance) / 2 after placement, times (1 - stranded GPU fraction).

    fill = mean over cpu, memory (and GPUs if the pod asks for any) of
    min(1, (requested + pod) / allocatable); balance = `balance_after` of the cpu
    and memory fractions (1 - stranded share of what is left, like
    kube-scheduler's BalancedAllocation); 0 on zero capacity. A pod that asks
    for no GPU on a node with free GPUs strands them (their cpu and memory get
    used up), so the term is multiplied by 1 - free_gpus / allocatable_gpus.
    """
    return packing_parts(nodes, pod).value


def interruption_likelihood(nodes: NodeArrays) -> np.ndarray:
    """Interruption likelihood in [0, 1]: 0 for on-demand, the bucket's for spot, worst if unknown."""
    likelihood = np.where(np.isnan(nodes.interruption), UNKNOWN_SPOT_LIKELIHOOD, nodes.interruption)
    return np.where(nodes.spot, np.minimum(np.maximum(likelihood, 0.0), 1.0), 0.0)


def restart_cost(pod: PodRequest) -> float:
    """What one interruption costs the pod's class, in [0, 1] (`RESTART_COST`)."""
    return RESTART_COST.get(pod.workload_class, RESTART_COST[LATENCY_SENSITIVE])


def risk_term(nodes: NodeArrays, pod: PodRequest) -> np.ndarray:
    """Preemption risk in [0, 1]: interruption likelihood * restart cost of the pod's class."""
    return interruption_likelihood(nodes) * restart_cost(pod)


def weighted_sum(
    weights: Weights, cost: np.ndarray, packing: np.ndarray, risk: np.ndarray
) -> np.ndarray:
    """w_cost * cost + w_packing * packing + w_risk * (1 - risk), clipped to [0, 1]."""
    total = weights.cost * cost + weights.packing * packing + weights.risk * (1.0 - risk)
    return np.minimum(np.maximum(total, 0.0), 1.0)


def to_priority(raw: np.ndarray, feasible: np.ndarray) -> np.ndarray:
    """round(10 * raw) half up as int64, 0 where the node fails the filter."""
    scores = np.floor(raw * MAX_EXTENDER_PRIORITY + 0.5).astype(np.int64)
    return np.where(feasible, scores, 0)


def combined_score(
    nodes: NodeArrays, pod: PodRequest, weights: Weights, feasible: np.ndarray | None = None
) -> np.ndarray:
    """Weighted sum in [0, 1] of cost, packing and (1 - risk); cost compares feasible nodes only."""
    cost = cost_term(effective_prices(nodes.price), dominant_share(nodes, pod), feasible)
    return weighted_sum(weights, cost, packing_term(nodes, pod), risk_term(nodes, pod))


def score_nodes(
    nodes: NodeArrays, pod: PodRequest, weights: Weights, reasons: np.ndarray | None = None
) -> np.ndarray:
    """Extender scores (int64 in [0, 10]); nodes that fail the filter get 0 and are not compared.

    Cost is normalised over the feasible nodes only, so an infeasible node can
    never move the others' scores.
    """
    if reasons is None:
        reasons = filter_nodes(nodes, pod)
    feasible = reasons == FIT
    if not feasible.any():
        return np.zeros(len(nodes), dtype=np.int64)
    return to_priority(combined_score(nodes, pod, weights, feasible), feasible)


def filter_matrix(rows: np.ndarray, pod: PodRequest) -> np.ndarray:
    """`filter_nodes` over an (N, 9) matrix in `NodeArrays.COLUMNS` order (same reasons)."""
    return filter_nodes(NodeArrays.from_matrix(rows), pod)


def score_matrix(
    rows: np.ndarray, pod: PodRequest, weights: Weights, reasons: np.ndarray
) -> np.ndarray:
    """`score_nodes` over an (N, 9) matrix in `NodeArrays.COLUMNS` order (same scores)."""
    return score_nodes(NodeArrays.from_matrix(rows), pod, weights, reasons)
