"""The price book as the simulated cluster needs it: offerings for Karpenter, scoring rows for nodes.

Both read the same `InstanceType` / `SpotPrice` rows the extender and the
portal's estimate read (`selectors.price_book`, `selectors.node_price`), so a node
Karpenter chose as cheapest is the node the extender prices the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from kiln.cluster.nodes import L_CAPACITY_TYPE, L_INSTANCE_TYPE, L_ZONE, labels_of
from scheduler import scoring, selectors
from scheduler.extender.protocol import GPU_RESOURCE, ProtocolError, is_spot, parse_quantity
from scheduler.karpenter import ON_DEMAND, SPOT, Offering
from scheduler.models import CapacityType, InstanceType, Node

GIB = 2**30


@dataclass(frozen=True)
class Shape:
    """An instance type's allocatable shape: cores, bytes, GPUs."""

    cpu: float
    memory: float
    gpu: float


def shapes() -> dict[str, Shape]:
    """Every priced instance type's shape."""
    return {
        t.name: Shape(float(t.vcpu), float(t.memory_gib) * GIB, float(t.gpus))
        for t in InstanceType.objects.all()
    }


def offerings(
    *, types: set[str] | None, zones: set[str] | None, capacity_types: set[str]
) -> list[Offering]:
    """Every offering the price book has within a NodePool's requirements (None = any).

    On-demand is offered in every allowed zone at the type's list price; spot only
    where a spot quote exists for the type in that zone.
    """
    on_demand, spot = selectors.price_book()
    known_zones = {z for _, z in spot}
    out: list[Offering] = []
    for name, shape in sorted(shapes().items()):
        if types is not None and name not in types:
            continue
        for zone in sorted(zones if zones is not None else known_zones):
            if ON_DEMAND in capacity_types and name in on_demand:
                out.append(_offering(name, zone, ON_DEMAND, shape, on_demand[name]))
            quote = spot.get((name, zone))
            if SPOT in capacity_types and quote is not None:
                out.append(_offering(name, zone, SPOT, shape, quote[0]))
    return out


def _offering(name: str, zone: str, capacity: str, shape: Shape, price: Decimal) -> Offering:
    return Offering(name, zone, capacity, shape.cpu, shape.memory, shape.gpu, float(price))


def quantity(value: object, default: float = 0.0) -> float:
    """A Kubernetes quantity as a float; `default` when missing or unreadable."""
    if value is None:
        return default
    try:
        return float(parse_quantity(value))
    except ProtocolError:
        return default


def allocatable(node: dict) -> tuple[float, float, float]:
    """A Node's allocatable cores, bytes and GPUs."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return (
        quantity(alloc.get("cpu")),
        quantity(alloc.get("memory")),
        quantity(alloc.get(GPU_RESOURCE)),
    )


PriceBook = tuple[dict[str, Decimal], dict[tuple[str, str], tuple[Decimal, int]]]


def scoring_rows(nodes: list[dict], book: PriceBook | None = None) -> tuple[np.ndarray, float]:
    """The (N, 9) scoring matrix of Node objects (nothing requested yet) and the highest known price.

    `book` is `selectors.price_book()` unless given (tests pass one of their own).
    """
    on_demand, spot = book if book is not None else selectors.price_book()
    matrix = np.zeros((len(nodes), len(scoring.NodeArrays.COLUMNS)))
    for i, node in enumerate(nodes):
        labels = labels_of(node)
        # Any provider's spot label makes it spot, as the extender reads labels (SPOT_LABELS).
        capacity = CapacityType.SPOT if is_spot(labels) else labels.get(L_CAPACITY_TYPE, "")
        row = Node(
            capacity_type=capacity if capacity in CapacityType.values else CapacityType.UNKNOWN,
            instance_type=labels.get(L_INSTANCE_TYPE, ""),
            zone=labels.get(L_ZONE, ""),
        )
        price = selectors.node_price(row, on_demand, spot)
        cpu, mem, gpu = allocatable(node)
        matrix[i] = (
            cpu,
            mem,
            gpu,
            0.0,
            0.0,
            0.0,
            float(price.hourly) if price.hourly is not None else np.nan,
            price.likelihood if price.likelihood is not None else np.nan,
            1.0 if row.capacity_type == CapacityType.SPOT else 0.0,
        )
    book = [float(p) for p in on_demand.values()] + [float(q[0]) for q in spot.values()]
    return matrix, max(book) if book else float("nan")
