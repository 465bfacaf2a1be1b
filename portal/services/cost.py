"""Cost estimate for an environment request, priced per instance type (on-demand or spot).

`price_table()` is the one place prices come from: the scheduler app's pricing
models (InstanceType, SpotPrice) when they hold data, else the built-in list
below (public list prices, eu-west-1, USD per hour). Nodes are sized on
m6i.xlarge (or the cheapest CPU type per vCPU) and GPUs on g5.xlarge (or the
cheapest per GPU). Everything else here is arithmetic on Decimals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from scheduler.models import InstanceType

CENT = Decimal("0.0001")


@dataclass(frozen=True)
class Price:
    """One instance type's shape and hourly prices."""

    name: str
    vcpu: int
    memory_gib: int
    gpu: int
    on_demand: Decimal
    spot: Decimal


FALLBACK_PRICES = {
    "m6i.xlarge": Price("m6i.xlarge", 4, 16, 0, Decimal("0.2140"), Decimal("0.0790")),
    "g5.xlarge": Price("g5.xlarge", 4, 16, 1, Decimal("1.1230"), Decimal("0.4520")),
}
GENERAL = "m6i.xlarge"
GPU = "g5.xlarge"
CONTROL_PLANE_HOURLY = Decimal("0.1000")  # a Kamaji tenant control plane's share of its pool
DATABASE_HOURLY = {
    "small": Decimal("0.0360"),
    "medium": Decimal("0.1910"),
    "large": Decimal("1.0080"),
}
DATABASE_SIZE = {"ephemeral": "small", "dev": "small", "staging": "medium", "prod": "large"}


def price_table() -> tuple[dict[str, Price], str]:
    """Prices by instance type and where they came from ("scheduler" or "built-in")."""
    table = _scheduler_prices()
    if table:
        return table, "scheduler"
    return FALLBACK_PRICES, "built-in"


def _scheduler_prices() -> dict[str, Price]:
    """The scheduler's InstanceType rows; spot = mean of the zones' current spot prices."""
    table: dict[str, Price] = {}
    for it in InstanceType.objects.prefetch_related("spot_prices"):
        spots = [sp.hourly for sp in it.spot_prices.all()]
        spot = (
            (sum(spots, Decimal(0)) / len(spots)).quantize(CENT) if spots else it.on_demand_hourly
        )
        table[it.name] = Price(
            it.name, int(it.vcpu), int(it.memory_gib), int(it.gpus), it.on_demand_hourly, spot
        )
    return table


def _general(table: dict[str, Price]) -> Price:
    if GENERAL in table:
        return table[GENERAL]
    cpu_only = [p for p in table.values() if p.gpu == 0 and p.vcpu > 0]
    return min(cpu_only or FALLBACK_PRICES.values(), key=lambda p: (p.on_demand / p.vcpu, p.name))


def _gpu(table: dict[str, Price]) -> Price:
    if GPU in table:
        return table[GPU]
    gpus = [p for p in table.values() if p.gpu > 0]
    return min(gpus, key=lambda p: (p.on_demand / p.gpu, p.name)) if gpus else FALLBACK_PRICES[GPU]


def estimate(
    *,
    env_class: str,
    ttl_hours: int,
    cpu: int,
    memory_gib: int,
    gpu: int,
    spot: bool,
    tenant_control_plane: bool,
    database: bool,
) -> dict:
    """Hourly and lifetime cost with one line per item; nodes = max(cpu, memory) / node shape, rounded up."""
    table, source = price_table()
    lines = []
    general = _general(table)
    nodes = max(math.ceil(cpu / general.vcpu), math.ceil(memory_gib / general.memory_gib), 1)
    unit = general.spot if spot else general.on_demand
    lines.append(_line(f"{general.name} ({'spot' if spot else 'on-demand'})", nodes, unit))
    if gpu:
        gpu_type = _gpu(table)
        gpu_nodes = math.ceil(gpu / max(gpu_type.gpu, 1))
        unit = gpu_type.spot if spot else gpu_type.on_demand
        lines.append(_line(f"{gpu_type.name} ({'spot' if spot else 'on-demand'})", gpu_nodes, unit))
    if tenant_control_plane:
        lines.append(_line("tenant control plane", 1, CONTROL_PLANE_HOURLY))
    if database:
        size = DATABASE_SIZE.get(env_class, "small")
        lines.append(_line(f"PostgreSQL ({size})", 1, DATABASE_HOURLY[size]))
    kept = kept_asleep_hourly(env_class=env_class, database=database)
    hourly = sum((line["hourly"] for line in lines), Decimal(0)).quantize(CENT, ROUND_HALF_UP)
    return {
        "hourly": hourly,
        "lifetime": (hourly * ttl_hours).quantize(Decimal("0.01"), ROUND_HALF_UP),
        "ttl_hours": ttl_hours,
        "lines": lines,
        "asleep_hourly": kept,
        "source": source,
        "currency": "USD",
    }


def kept_asleep_hourly(*, env_class: str, database: bool) -> Decimal:
    """What an asleep environment still pays an hour: its database claim, which sleeping keeps
    (portal/compose/sleep.py); nothing without one."""
    if not database:
        return Decimal("0.0000")
    return DATABASE_HOURLY[DATABASE_SIZE.get(env_class, "small")]


def _line(item: str, quantity: int, unit_price: Decimal) -> dict:
    return {
        "item": item,
        "quantity": quantity,
        "unit_price": unit_price,
        "hourly": (unit_price * quantity).quantize(CENT, ROUND_HALF_UP),
    }
