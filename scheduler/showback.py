"""Showback from what ran: node-hours each environment's NodePool provisioned, priced.

Node sync records every node's lifetime (`NodeLifetime`: launched at the Node's
creationTimestamp, removed when it left the cluster, labels copied at launch). An
environment's cost from what ran is, over the lifetimes labelled with its namespace
and clipped to the environment's own window (created .. deleted, or now):

    cost = Σ node-hours × hourly price of that node

priced by the same rule the extender scores with (`selectors.node_price`, from the
InstanceType and SpotPrice models): spot nodes at their zone's spot price, the rest
on-demand; a node whose type has no price is charged the highest known price, flagged
`unpriced_hours`, so it can never look cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Q
from django.utils import timezone

from scheduler import selectors
from scheduler.models import NodeLifetime

CENTS = Decimal("0.01")
HOURS = Decimal("0.0001")


@dataclass(frozen=True)
class Window:
    """Which environment to price: its namespace (the nodes' `kiln.dev/environment`) and when
    it existed (end None: still there)."""

    namespace: str
    start: datetime
    end: datetime | None = None


@dataclass
class RanCost:
    """Node-hours and their price for one environment, with one line per instance and capacity type."""

    nodes: int = 0
    node_hours: Decimal = Decimal("0")
    cost: Decimal = Decimal("0.00")
    unpriced_hours: Decimal = Decimal("0")
    running_nodes: int = 0
    lines: dict[str, dict[str, Decimal]] = field(default_factory=dict)


def environment_ran_cost(
    *, windows: Mapping[str, Window], now: datetime | None = None
) -> dict[str, RanCost]:
    """Cost from what ran per key of `windows` (keys are the caller's, e.g. an environment id)."""
    now = now or timezone.now()
    namespaces = {w.namespace for w in windows.values()}
    out: dict[str, RanCost] = {key: RanCost() for key in windows}
    if not namespaces:
        return out
    earliest = min(w.start for w in windows.values())
    lifetimes = list(
        NodeLifetime.objects.filter(environment__in=namespaces).filter(
            Q(removed_at__isnull=True) | Q(removed_at__gt=earliest)
        )
    )
    on_demand, spot = price_book = selectors.price_book()
    highest = max([*on_demand.values(), *(q[0] for q in spot.values())], default=Decimal("0"))
    for key, window in windows.items():
        total = out[key]
        end_of_window = min(window.end or now, now)
        for life in lifetimes:
            if life.environment != window.namespace:
                continue
            start = max(life.launched_at, window.start)
            end = min(life.removed_at or now, end_of_window)
            if end <= start:
                continue
            hours = (Decimal((end - start).total_seconds()) / 3600).quantize(HOURS, ROUND_HALF_UP)
            price = selectors.node_price(life, *price_book).hourly
            if price is None:
                price = highest
                total.unpriced_hours += hours
            total.nodes += 1
            total.running_nodes += int(life.removed_at is None and window.end is None)
            total.node_hours += hours
            line = total.lines.setdefault(
                f"{life.instance_type or 'unknown'} ({life.capacity_type})",
                {"node_hours": Decimal("0"), "hourly": price, "cost": Decimal("0")},
            )
            line["node_hours"] += hours
            line["cost"] += hours * price
        total.cost = sum((ln["cost"] for ln in total.lines.values()), Decimal("0")).quantize(
            CENTS, ROUND_HALF_UP
        )
        for line in total.lines.values():
            line["cost"] = line["cost"].quantize(CENTS, ROUND_HALF_UP)
    return out
