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

from scheduler import scoring
from scheduler.extender.snapshot import NodeSnapshot, fail_safe_prices
from scheduler.models import CapacityType, InstanceType, Node, ReplayReport, SpotPrice

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
    return NodeSnapshot(
        [n.name for n in nodes], matrix, max_price=max(book) if book else float("nan")
    )


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
    """One node's verdict for a sample pod: filter reason, the three terms and the final score."""

    name: str
    spot: bool
    price: float
    reason: str
    cost: float
    packing: float
    risk: float
    score: int


def score_explain(
    pod: scoring.PodRequest, weights: scoring.Weights | None = None
) -> list[NodeExplanation]:
    """Score a sample pod against the current inventory, term by term, best first."""
    weights = weights or scoring_weights()
    snapshot = build_snapshot()
    if not snapshot.names:
        return []
    matrix = fail_safe_prices(snapshot.matrix.copy(), snapshot)
    nodes = scoring.NodeArrays.from_matrix(matrix)
    reasons = scoring.filter_nodes(nodes, pod)
    feasible = reasons == scoring.FIT
    prices = scoring.effective_prices(nodes.price)
    cost = scoring.cost_term(prices, scoring.dominant_share(nodes, pod), feasible)
    packing = scoring.packing_term(nodes, pod)
    risk = scoring.risk_term(nodes, pod)
    scores = scoring.score_matrix(matrix, pod, weights, reasons)
    rows = [
        NodeExplanation(
            name=name,
            spot=bool(nodes.spot[i]),
            price=float(prices[i]),
            reason=scoring.REASON_MESSAGES.get(int(reasons[i]), "fits"),
            cost=float(cost[i]) if feasible[i] else 0.0,
            packing=float(packing[i]) if feasible[i] else 0.0,
            risk=float(risk[i]) if feasible[i] else 0.0,
            score=int(scores[i]),
        )
        for i, name in enumerate(snapshot.names)
    ]
    return sorted(rows, key=lambda r: (r.reason != "fits", -r.score, r.name))
