"""Showback from what ran (scheduler/showback.py): node-hours clipped to the environment's window, priced."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from scheduler.models import InstanceType, NodeLifetime
from scheduler.showback import Window, environment_ran_cost

pytestmark = pytest.mark.django_db


def test_lifetimes_are_clipped_to_the_window_and_unknown_types_pay_the_highest_price():
    InstanceType.objects.create(
        name="m6i.xlarge",
        family="m6i",
        vcpu=4,
        memory_gib=Decimal("16"),
        on_demand_hourly=Decimal("0.2000"),
    )
    InstanceType.objects.create(
        name="r6i.xlarge",
        family="r6i",
        vcpu=4,
        memory_gib=Decimal("32"),
        on_demand_hourly=Decimal("0.3000"),
    )
    now = timezone.now()
    # Namespace "web" was used by an earlier environment (ended 10 h ago) and a new one (from 4 h ago).
    old = Window("web", now - timedelta(hours=20), now - timedelta(hours=10))
    new = Window("web", now - timedelta(hours=4))
    NodeLifetime.objects.create(
        name="ip-old", environment="web", instance_type="m6i.xlarge", capacity_type="on-demand",
        launched_at=now - timedelta(hours=12), removed_at=now - timedelta(hours=9),
    )  # fmt: skip
    NodeLifetime.objects.create(
        name="ip-new", environment="web", instance_type="x9.mystery", capacity_type="on-demand",
        launched_at=now - timedelta(hours=2),
    )  # fmt: skip
    ran = environment_ran_cost(windows={"old": old, "new": new}, now=now)
    # old: ip-old ran 12 h .. 9 h ago, the window closed 10 h ago: 2 h x $0.20 = $0.40.
    assert (ran["old"].node_hours, ran["old"].cost, ran["old"].running_nodes) == (
        Decimal("2.0000"),
        Decimal("0.40"),
        0,
    )
    # new: ip-new is still up, 2 h, unpriced: charged the highest known price ($0.30): $0.60.
    assert (ran["new"].node_hours, ran["new"].cost) == (Decimal("2.0000"), Decimal("0.60"))
    assert ran["new"].unpriced_hours == Decimal("2.0000") and ran["new"].running_nodes == 1


def test_no_windows_no_query():
    assert environment_ran_cost(windows={}) == {}
