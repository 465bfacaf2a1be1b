"""Cost estimate for an environment request, priced per instance type (on-demand or spot).

`price_table()` is the one place prices come from: the scheduler app's pricing
models when they hold data, else the built-in list below (public list prices,
eu-west-1, USD per hour). Everything else here is arithmetic on Decimals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

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
    try:
        from scheduler.models import InstanceType  # noqa: F401 - present once the scheduler ships pricing
    except ImportError:
        return FALLBACK_PRICES, "built-in"
    table = _scheduler_prices()
    if all(name in table for name in (GENERAL, GPU)):
        return table, "scheduler"
    return {**FALLBACK_PRICES, **table}, "built-in"


def _scheduler_prices() -> dict[str, Price]:
    """Read the scheduler's pricing models; tolerant of field names so a schema change degrades to built-in."""
    from scheduler.models import InstanceType

    table: dict[str, Price] = {}
    try:
        for it in InstanceType.objects.all():
            on_demand = _first(it, "on_demand_price", "on_demand_hourly", "price_on_demand")
            spot = _first(it, "spot_price", "spot_hourly", "price_spot")
            if spot is None:
                spot = _latest_spot(it)
            if on_demand is None:
                continue
            table[it.name] = Price(
                it.name,
                int(_first(it, "vcpu", "vcpus", "cpu") or 0),
                int(_first(it, "memory_gib", "memory_gb", "memory") or 0),
                int(_first(it, "gpu", "gpus", "gpu_count") or 0),
                Decimal(str(on_demand)),
                Decimal(str(spot if spot is not None else on_demand)),
            )
    except Exception:  # noqa: BLE001 - the estimate must not break the form; built-in prices apply
        return {}
    return table


def _first(obj, *names):
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _latest_spot(instance_type):
    for rel in ("spot_prices", "spotprice_set"):
        manager = getattr(instance_type, rel, None)
        if manager is not None:
            row = manager.order_by("-id").first()
            if row is not None:
                return _first(row, "price", "hourly", "spot_price")
    return None


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
    general = table[GENERAL]
    nodes = max(math.ceil(cpu / general.vcpu), math.ceil(memory_gib / general.memory_gib), 1)
    unit = general.spot if spot else general.on_demand
    lines.append(_line(f"{general.name} ({'spot' if spot else 'on-demand'})", nodes, unit))
    if gpu:
        gpu_type = table[GPU]
        gpu_nodes = math.ceil(gpu / max(gpu_type.gpu, 1))
        unit = gpu_type.spot if spot else gpu_type.on_demand
        lines.append(_line(f"{gpu_type.name} ({'spot' if spot else 'on-demand'})", gpu_nodes, unit))
    if tenant_control_plane:
        lines.append(_line("tenant control plane", 1, CONTROL_PLANE_HOURLY))
    if database:
        size = DATABASE_SIZE.get(env_class, "small")
        lines.append(_line(f"PostgreSQL ({size})", 1, DATABASE_HOURLY[size]))
    hourly = sum((line["hourly"] for line in lines), Decimal(0)).quantize(CENT, ROUND_HALF_UP)
    return {
        "hourly": hourly,
        "lifetime": (hourly * ttl_hours).quantize(Decimal("0.01"), ROUND_HALF_UP),
        "ttl_hours": ttl_hours,
        "lines": lines,
        "source": source,
        "currency": "USD",
    }


def _line(item: str, quantity: int, unit_price: Decimal) -> dict:
    return {
        "item": item,
        "quantity": quantity,
        "unit_price": unit_price,
        "hourly": (unit_price * quantity).quantize(CENT, ROUND_HALF_UP),
    }
