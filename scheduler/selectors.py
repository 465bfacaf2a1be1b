"""Reads: the scoring snapshot of the inventory, pricing tables, nodes and stored replays.

The cluster's own objects (nodes with their pods, Workload Commitment now) are read in
`scheduler/cluster_reads.py`; node-hours from what ran in `scheduler/showback.py`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
from django.conf import settings
from django.db.models import QuerySet

from scheduler import pools, scoring
from scheduler.extender.snapshot import NodeSnapshot, fail_safe_prices
from scheduler.models import CapacityType, InstanceType, Node, ReplayReport, SpotPrice
from scheduler.score_terms import score_terms

_LIKELIHOOD = {bucket: value for bucket, (_, value) in enumerate(scoring.INTERRUPTION_BUCKETS)}
_cache_lock = threading.Lock()
_cache: dict[str, tuple[float, NodeSnapshot]] = {}


def scoring_weights() -> scoring.Weights:
    """The configured score weights (validated when settings load)."""
    return scoring.Weights(
        cost=settings.KILN_SCHEDULER_WEIGHT_COST,
        packing=settings.KILN_SCHEDULER_WEIGHT_PACKING,
        risk=settings.KILN_SCHEDULER_WEIGHT_RISK,
    )


@dataclass(frozen=True)
class NodePrice:
    """The hourly price and interruption likelihood the scorer uses for one node (None = unknown)."""

    hourly: Decimal | None
    likelihood: float | None


def price_book() -> tuple[dict[str, Decimal], dict[tuple[str, str], tuple[Decimal, int]]]:
    """On-demand prices by type, and (spot price, bucket) by (type, zone)."""
    on_demand = dict(InstanceType.objects.values_list("name", "on_demand_hourly"))
    spot = {
        (t, z): (p, b)
        for t, z, p, b in SpotPrice.objects.values_list(
            "instance_type__name", "zone", "hourly", "interruption_bucket"
        )
    }
    return on_demand, spot


def node_price(
    node: Node, on_demand: dict[str, Decimal], spot: dict[tuple[str, str], tuple[Decimal, int]]
) -> NodePrice:
    """The price Kiln scores a node with: spot price for spot nodes, on-demand otherwise.

    A spot node without a spot quote falls back to its type's on-demand price
    with the worst interruption likelihood; a node whose type has no price is
    unpriced (None), which the scorer treats as on-demand at the highest known price.
    """
    if node.capacity_type == CapacityType.SPOT:
        quote = spot.get((node.instance_type, node.zone))
        if quote is not None:
            return NodePrice(quote[0], _LIKELIHOOD.get(quote[1]))
        return NodePrice(on_demand.get(node.instance_type), None)
    return NodePrice(on_demand.get(node.instance_type), 0.0)


def build_snapshot() -> NodeSnapshot:
    """Read every node and its price into a scoring snapshot (cores, bytes, GPUs, $/h)."""
    on_demand, spot = price_book()
    nodes = list(Node.objects.order_by("name"))
    matrix = np.zeros((len(nodes), len(scoring.NodeArrays.COLUMNS)))
    for i, node in enumerate(nodes):
        price = node_price(node, on_demand, spot)
        matrix[i] = (
            node.allocatable_cpu_millis / 1000.0,
            float(node.allocatable_memory_bytes),
            float(node.allocatable_gpus),
            node.requested_cpu_millis / 1000.0,
            float(node.requested_memory_bytes),
            float(node.requested_gpus),
            float(price.hourly) if price.hourly is not None else np.nan,
            price.likelihood if price.likelihood is not None else np.nan,
            1.0 if node.capacity_type == CapacityType.SPOT else 0.0,
        )
    book = [float(p) for p in on_demand.values()] + [float(q[0]) for q in spot.values()]
    layout = pools.PoolLayout.build(
        (
            n.instance_type,
            n.zone,
            n.capacity_type,
            str((n.labels or {}).get(pools.L_ENVIRONMENT, "")),
        )
        for n in nodes
    )
    return NodeSnapshot(
        [n.name for n in nodes],
        matrix,
        max_price=max(book) if book else float("nan"),
        layout=layout,
        placements=node_placements(nodes, layout),
        spread_k=spread_k(),
    )


def node_placements(nodes: list[Node], layout: pools.PoolLayout) -> pools.Placements:
    """Workloads' spot replicas per capacity pool and their replicas, from the inventory's
    per-node workload counts (`Node.workloads`, written by the node sync)."""
    placed = pools.Placements()
    for i, node in enumerate(nodes):
        spot = node.capacity_type == CapacityType.SPOT
        pool = layout.pools[layout.pool_of[i]]
        for workload, counts in (node.workloads or {}).items():
            try:
                on_node, replicas = int(counts[0]), int(counts[1])
            except (TypeError, ValueError, IndexError, KeyError):
                continue  # an unreadable entry counts nothing
            placed.add(workload, pool, spot, on_node)
            placed.set_replicas(workload, max(replicas, placed.replicas.get(workload, 0)))
    return placed


def spread_k() -> dict[str, int]:
    """k of the capacity-pool spread filter per workload class (KILN_SCHEDULER_SPREAD_K)."""
    return pools.parse_spread_k(settings.KILN_SCHEDULER_SPREAD_K)


def node_snapshot() -> NodeSnapshot:
    """The inventory snapshot, rebuilt at most every KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS."""
    ttl = settings.KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get("default")
        if cached is not None and now < cached[0]:
            return cached[1]
    snapshot = build_snapshot()
    with _cache_lock:
        _cache["default"] = (now + ttl, snapshot)
    return snapshot


def node_snapshot_if_fresh() -> NodeSnapshot | None:
    """The cached snapshot if node_snapshot() would answer from it now, else None (no database read).

    One read of the cache: a caller that checked freshness and then called
    node_snapshot() could find it expired in between and read the database where it
    must not (the extender's event loop)."""
    with _cache_lock:
        cached = _cache.get("default")
    return cached[1] if cached is not None and time.monotonic() < cached[0] else None


def snapshot_invalidate() -> None:
    """Drop the cached snapshot (after a sync changed nodes or prices)."""
    with _cache_lock:
        _cache.clear()


def instance_type_list() -> QuerySet[InstanceType]:
    """Instance types with their spot quotes, for the pricing table."""
    return InstanceType.objects.prefetch_related("spot_prices").order_by("family", "vcpu", "name")


def replay_report_list(limit: int = 20) -> list[ReplayReport]:
    """The most recent stored replays."""
    return list(ReplayReport.objects.order_by("-created_at")[:limit])


@dataclass(frozen=True)
class NodeExplanation:
    """One node's verdict for a sample pod: every input and term of its score, in the units a
    person reads (cores, GiB, $/h); the terms as `scheduler.score_terms` computed them."""

    name: str
    spot: bool
    reason: str
    alloc_cpu: float  # cores
    alloc_mem_gib: float
    alloc_gpu: int
    req_cpu: float  # cores requested before the pod
    req_mem_gib: float
    req_gpu: int
    price: float  # $/h the scorer uses (unpriced: the highest known price)
    share: float  # the pod's dominant share of the node, in [0, 1]
    pod_cost: float  # $/h the pod costs here: price * share
    cost: float
    fill_cpu: float
    fill_mem: float
    fill_gpu: float | None  # only when the pod asks for GPUs
    balance: float
    stranded_gpu: float
    packing: float
    likelihood: float
    risk: float
    raw: float  # the weighted sum in [0, 1] before rounding
    score: int
    parts: tuple[float, float, float]  # w_cost * cost, w_packing * packing, w_risk * (1 - risk)

    @property
    def fits(self) -> bool:
        """True when the node passes the filter (and so is scored)."""
        return self.reason == "fits"

    @property
    def fill(self) -> float:
        """Mean fill after placement over cpu, memory (and GPUs when the pod asks for them)."""
        fills = [self.fill_cpu, self.fill_mem] + ([] if self.fill_gpu is None else [self.fill_gpu])
        return sum(fills) / len(fills)

    @property
    def left(self) -> tuple[float, float]:
        """The cpu and memory fractions left free after placement (balance's inputs)."""
        return 1.0 - self.fill_cpu, 1.0 - self.fill_mem


@dataclass(frozen=True)
class ScoreExplanation:
    """A sample pod scored against the inventory: the nodes best first and the shared inputs."""

    rows: list[NodeExplanation]
    cheapest: float | None  # the lowest pod cost ($/h) over every feasible node
    cheapest_nodes: tuple[str, ...]  # the feasible nodes with that pod cost
    restart: float  # what one interruption costs the pod's class, in [0, 1]
    weights: scoring.Weights


def _finite(value: float, default: float = 0.0) -> float:
    return float(value) if np.isfinite(value) else default


def score_explain(
    pod: scoring.PodRequest, weights: scoring.Weights | None = None
) -> ScoreExplanation:
    """Score a sample pod against the current inventory, term by term, best first: the same
    numbers `scoring.score_nodes` gives the extender (through `scheduler.score_terms`)."""
    weights = weights or scoring_weights()
    snapshot = build_snapshot()
    restart = scoring.restart_cost(pod)
    if not snapshot.names:
        return ScoreExplanation([], None, (), restart, weights)
    matrix = fail_safe_prices(snapshot.matrix.copy(), snapshot)
    nodes = scoring.NodeArrays.from_matrix(matrix)
    terms = score_terms(nodes, pod, weights)
    gib = float(2**30)
    rows = []
    for i, name in enumerate(snapshot.names):
        fits = bool(terms.feasible[i])
        gpu_fill = terms.packing.gpu
        rows.append(
            NodeExplanation(
                name=name,
                spot=bool(nodes.spot[i]),
                reason=scoring.REASON_MESSAGES.get(int(terms.reasons[i]), "fits"),
                alloc_cpu=float(nodes.alloc_cpu[i]),
                alloc_mem_gib=float(nodes.alloc_mem[i]) / gib,
                alloc_gpu=int(nodes.alloc_gpu[i]),
                req_cpu=float(nodes.req_cpu[i]),
                req_mem_gib=float(nodes.req_mem[i]) / gib,
                req_gpu=int(nodes.req_gpu[i]),
                price=float(terms.price[i]),
                share=_finite(terms.share[i], 1.0),
                pod_cost=_finite(terms.pod_cost[i]),
                cost=float(terms.cost[i]) if fits else 0.0,
                fill_cpu=float(terms.packing.cpu[i]),
                fill_mem=float(terms.packing.memory[i]),
                fill_gpu=None if gpu_fill is None else float(gpu_fill[i]),
                balance=float(terms.packing.balance[i]),
                stranded_gpu=float(terms.packing.stranded_gpu[i]),
                packing=float(terms.packing.value[i]) if fits else 0.0,
                likelihood=float(terms.likelihood[i]),
                risk=float(terms.risk[i]) if fits else 0.0,
                raw=float(terms.raw[i]) if fits else 0.0,
                score=int(terms.score[i]),
                parts=(
                    weights.cost * float(terms.cost[i]),
                    weights.packing * float(terms.packing.value[i]),
                    weights.risk * (1.0 - float(terms.risk[i])),
                ),
            )
        )
    cheapest_nodes = tuple(
        r.name
        for r, c in zip(rows, terms.pod_cost, strict=True)
        if r.fits and terms.cheapest is not None and c == terms.cheapest
    )
    rows.sort(key=lambda r: (not r.fits, -r.score, -r.raw, r.name))
    return ScoreExplanation(rows, terms.cheapest, cheapest_nodes, restart, weights)
