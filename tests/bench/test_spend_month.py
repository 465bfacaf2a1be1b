"""The month of simulated use (bench/portal/spend_month.py, its people and pricing in
bench/portal/spend_model.py): the people are seeded and shaped as the docstring says, and
node-hours count what holds nodes, a sleeping pool only until Karpenter would have removed its
emptied nodes."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from bench.portal import spend_model as sm
from portal.lifecycle import Status


def test_people_are_the_same_for_a_seed_and_differ_between_seeds():
    assert sm.people(101, 8) == sm.people(101, 8)
    assert sm.people(101, 8) != sm.people(102, 8)
    kinds = [kind for kind, _ in sm.people(101, 8)]
    assert kinds == ["regular"] * 4 + ["occasional"] * 2 + ["abandoned"] * 2


def test_regulars_work_weekdays_with_a_lunch_gap_and_the_abandoned_stop_early():
    crowd = sm.people(7, 8)
    for kind, sessions in crowd:
        assert all(sm.MONTH_START <= a < b < sm.MONTH_END for a, b in sessions)
        if kind == "regular":
            assert all(a.weekday() < 5 for a, _ in sessions)
            # Sessions come in pairs around an hour's lunch.
            assert any(b2 - a2 >= timedelta(hours=2) for a2, b2 in sessions)
            gaps = [n[0] - p[1] for p, n in zip(sessions, sessions[1:], strict=False)]
            assert timedelta(hours=1) in gaps
        if kind == "abandoned":
            assert 1 <= len(sessions) <= 3
            assert sessions[0][0] < sm.MONTH_START + timedelta(days=14)


def test_node_hours_count_awake_time_and_a_sleeping_pool_until_it_is_emptied():
    t0 = sm.MONTH_START
    tracked = sm.Tracked(
        env_id=1, owner=0, created=t0, hourly=Decimal("0.5"), consolidate_s=300,
        seen=[
            (t0, Status.PROVISIONING),
            (t0 + timedelta(minutes=1), Status.READY),  # 10 h awake
            (t0 + timedelta(hours=10, minutes=1), Status.SLEEPING),  # asleep 14 h: 5 min on
            (t0 + timedelta(hours=24, minutes=1), Status.WAKING),
            (t0 + timedelta(hours=24, minutes=1, seconds=12), Status.READY),  # until 30 h
            (t0 + timedelta(hours=30, minutes=1), Status.DELETED),
        ],
    )  # fmt: skip
    # 10 h + 5 min + 12 s + (6 h - 12 s) = 16 h 5 min.
    assert sm.node_hours(tracked) == Decimal(16) + Decimal(5) / 60


@pytest.mark.django_db
def test_the_command_refuses_bad_arguments():
    with pytest.raises(CommandError):
        call_command("spend_month_demo", "--seeds", "a,b", "--json")
    with pytest.raises(CommandError):
        call_command("spend_month_demo", "--persons", "2", "--json")
