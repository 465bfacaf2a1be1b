"""Cost estimate: priced from the scheduler's pricing models when they hold data."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from portal.services import cost
from scheduler.models import InstanceType, SpotPrice

pytestmark = pytest.mark.django_db


def test_built_in_prices_when_the_scheduler_has_none():
    result = cost.estimate(
        env_class="dev",
        ttl_hours=10,
        cpu=4,
        memory_gib=16,
        gpu=0,
        spot=False,
        tenant_control_plane=False,
        database=False,
    )
    assert result["source"] == "built-in"
    assert result["hourly"] == cost.FALLBACK_PRICES["m6i.xlarge"].on_demand


def test_scheduler_prices_with_spot_averaged_over_zones():
    m6i = InstanceType.objects.create(
        name="m6i.xlarge",
        family="m6i",
        vcpu=4,
        memory_gib=Decimal("16"),
        on_demand_hourly=Decimal("0.2000"),
    )
    g5 = InstanceType.objects.create(
        name="g5.xlarge",
        family="g5",
        vcpu=4,
        memory_gib=Decimal("16"),
        gpus=1,
        gpu_model="A10G",
        on_demand_hourly=Decimal("1.0000"),
    )
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for zone, price in (("a", "0.0600"), ("b", "0.0800")):
        SpotPrice.objects.create(
            instance_type=m6i,
            zone=zone,
            hourly=Decimal(price),
            interruption_bucket=0,
            observed_at=now,
        )
    SpotPrice.objects.create(
        instance_type=g5, zone="a", hourly=Decimal("0.4000"), interruption_bucket=1, observed_at=now
    )
    # spot: 12 CPU / 4 = 3 nodes x mean(0.06, 0.08) = 0.21; 1 GPU node at 0.40; database small 0.036
    result = cost.estimate(
        env_class="dev",
        ttl_hours=10,
        cpu=12,
        memory_gib=16,
        gpu=1,
        spot=True,
        tenant_control_plane=False,
        database=True,
    )
    assert result["source"] == "scheduler"
    assert result["hourly"] == Decimal("0.6460")
    assert result["lifetime"] == Decimal("6.46")
    # on-demand: 3 x 0.20 + 1 x 1.00 + 0.036 = 1.636
    on_demand = cost.estimate(
        env_class="dev",
        ttl_hours=1,
        cpu=12,
        memory_gib=16,
        gpu=1,
        spot=False,
        tenant_control_plane=False,
        database=True,
    )
    assert on_demand["hourly"] == Decimal("1.6360")
