"""Demo pricing (AWS us-east-1 list prices); idempotent, audited. Nodes come from the cluster."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction
from django.utils import timezone

import audit
from kiln.identity.permissions import system_actor
from scheduler.models import InstanceType, InterruptionBucket, SpotPrice

# name, family, vCPU, memory GiB, GPUs, GPU model, on-demand $/h (Linux, us-east-1)
INSTANCE_TYPES = (
    ("m5.large", "m5", 2, "8", 0, "", "0.0960"),
    ("m5.xlarge", "m5", 4, "16", 0, "", "0.1920"),
    ("m5.2xlarge", "m5", 8, "32", 0, "", "0.3840"),
    ("m6i.large", "m6i", 2, "8", 0, "", "0.0960"),
    ("m6i.xlarge", "m6i", 4, "16", 0, "", "0.1920"),
    ("m6i.2xlarge", "m6i", 8, "32", 0, "", "0.3840"),
    ("m6a.large", "m6a", 2, "8", 0, "", "0.0864"),
    ("m6a.xlarge", "m6a", 4, "16", 0, "", "0.1728"),
    ("m6a.2xlarge", "m6a", 8, "32", 0, "", "0.3456"),
    ("c6i.large", "c6i", 2, "4", 0, "", "0.0850"),
    ("c6i.xlarge", "c6i", 4, "8", 0, "", "0.1700"),
    ("c6i.2xlarge", "c6i", 8, "16", 0, "", "0.3400"),
    ("r6i.large", "r6i", 2, "16", 0, "", "0.1260"),
    ("r6i.xlarge", "r6i", 4, "32", 0, "", "0.2520"),
    ("r6i.2xlarge", "r6i", 8, "64", 0, "", "0.5040"),
    ("m7i.xlarge", "m7i", 4, "16", 0, "", "0.2016"),
    ("m7i.2xlarge", "m7i", 8, "32", 0, "", "0.4032"),
    ("g5.xlarge", "g5", 4, "16", 1, "NVIDIA A10G", "1.0060"),
    ("g5.2xlarge", "g5", 8, "32", 1, "NVIDIA A10G", "1.2120"),
    ("g5.12xlarge", "g5", 48, "192", 4, "NVIDIA A10G", "5.6720"),
    ("g6.xlarge", "g6", 4, "16", 1, "NVIDIA L4", "0.8048"),
    ("g6.2xlarge", "g6", 8, "32", 1, "NVIDIA L4", "0.9776"),
)
# us-east-1 and the eu-west-1 zones environments' NodePools name (portal.compose DEFAULT_ZONES),
# so every type and zone a composed NodePool allows has a price.
ZONES = (
    "us-east-1a",
    "us-east-1b",
    "us-east-1c",
    "us-east-1d",
    "eu-west-1a",
    "eu-west-1b",
    "eu-west-1c",
)
# Spot price as a fraction of on-demand per zone, and the zone's interruption bucket
# offset: spot typically sells 60-70% under on-demand, and zones differ.
ZONE_SPOT_RATIO = tuple(
    Decimal(r) for r in ("0.34", "0.38", "0.31", "0.42", "0.35", "0.33", "0.37")
)
FAMILY_BUCKET = {"m5": 1, "m6i": 0, "m6a": 0, "m7i": 0, "c6i": 2, "r6i": 1, "g5": 3, "g6": 3}


def _spot_quotes(itype: InstanceType) -> list[tuple[str, Decimal, int]]:
    """(zone, spot $/h, bucket) for a type: a zone ratio of on-demand and a family bucket."""
    quotes = []
    for i, zone in enumerate(ZONES):
        price = (itype.on_demand_hourly * ZONE_SPOT_RATIO[i]).quantize(Decimal("0.0001"))
        bucket = min(
            FAMILY_BUCKET.get(itype.family, 2) + (1 if i == 3 else 0), InterruptionBucket.OVER_20
        )
        quotes.append((zone, price, bucket))
    return quotes


@transaction.atomic
def seed_demo() -> list[str]:
    """Create demo instance types and spot quotes (node sync reads the nodes from the cluster)."""
    created: list[str] = []
    now = timezone.now()
    for name, family, vcpu, mem, gpus, gpu_model, price in INSTANCE_TYPES:
        itype, made = InstanceType.objects.get_or_create(
            name=name,
            defaults={
                "family": family,
                "vcpu": vcpu,
                "memory_gib": Decimal(mem),
                "gpus": gpus,
                "gpu_model": gpu_model,
                "on_demand_hourly": Decimal(price),
            },
        )
        if made:
            created.append(f"instance type {name}")
        for zone, hourly, bucket in _spot_quotes(itype):
            _, made = SpotPrice.objects.get_or_create(
                instance_type=itype,
                zone=zone,
                defaults={"hourly": hourly, "interruption_bucket": bucket, "observed_at": now},
            )
            if made:
                created.append(f"spot price {name}@{zone}")
    if created:
        audit.record(
            system_actor("seed"),
            "scheduler.pricing.seeded",
            "scheduler:pricing",
            {"created": len(created)},
        )
    return created
