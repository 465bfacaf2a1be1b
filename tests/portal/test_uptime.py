"""Hours up leave the sleeps out (portal/uptime.py), on the showback page as in the budget:
an environment asleep half of its life is estimated at half of its life's price."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.apps import apps
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from portal import selectors, uptime
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep
from portal.services import sleep
from portal.services.steps import position_of
from tests.portal.test_lifecycle_notices import ready_env

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def test_a_sleep_inside_the_window_is_left_out_and_one_outside_it_is_not_counted():
    sleeps = [[at(2).isoformat(), at(5).isoformat()], [at(20).isoformat(), at(30).isoformat()]]
    slept = uptime.periods(sleeps)
    assert uptime.up_hours(ready_at=at(0), gone_at=at(10), slept=slept, now=at(40)) == Decimal(
        "7.00"
    )
    # A window that cuts a sleep counts only its part of it; an open sleep lasts until the end.
    assert uptime.up_hours(
        ready_at=at(0), gone_at=None, slept=uptime.periods([[at(4).isoformat(), None]]), now=at(10),
        begin=at(3), end=at(6),
    ) == Decimal("1.00")  # fmt: skip


@given(
    cuts=st.lists(st.integers(0, 1000), min_size=0, max_size=8, unique=True),
    life=st.integers(1, 1000),
)
def test_up_and_asleep_hours_make_the_whole_life(cuts, life):
    """Any sleeps, however they fall: up + asleep = ready to gone, and up is never negative."""
    points = sorted(c for c in cuts if c < life)
    pairs = [
        [at(a).isoformat(), at(b).isoformat()]
        for a, b in zip(points[::2], points[1::2], strict=False)
    ]
    slept = uptime.periods(pairs)
    up = uptime.up_hours(ready_at=at(0), gone_at=at(life), slept=slept, now=at(life + 5))
    asleep = uptime.asleep_seconds(slept, at(0), at(life)) / 3600
    assert up >= 0 and abs(float(up) + asleep - life) < 0.011


@pytest.mark.parametrize(
    "pair",
    [[], [None, None], ["yesterday", None], ["2026-12-01T00:00:00", None], "x", 7,
     [at(1).isoformat(), "soon"]],
)  # fmt: skip
def test_a_sleep_that_does_not_read_is_passed_over_not_a_500(pair):
    good = [at(2).isoformat(), at(3).isoformat()]
    assert uptime.periods([pair, good]) == [(at(2), at(3))]
    assert uptime.periods("not a list") == []


def test_opening_and_closing_a_sleep():
    opened = uptime.asleep_from([], at(1))
    assert opened == [[at(1).isoformat(), None]] and uptime.asleep_from(opened, at(2)) == opened
    closed = uptime.awake_from(opened, at(3))
    assert closed == [[at(1).isoformat(), at(3).isoformat()]]
    assert uptime.awake_from(closed, at(4)) == closed


@pytest.mark.django_db
def test_sleeping_and_waking_record_the_sleep_and_showback_leaves_it_out(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        sleep.sleep_environment(env, actor=people["alice"])
    env.refresh_from_db()
    assert env.status == Status.SLEEPING and len(env.sleeps) == 1 and env.sleeps[0][1] is None
    # The sleep ends as the wake begins (its nodes come back then; a wake that fails is awake).
    woken = sleep.wake_environment(env, actor=people["alice"])
    assert woken.status == Status.WAKING and woken.sleeps[0][1] is not None
    # Ten hours ready, four of them asleep: six hours at its price.
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(
        ready_at=now - timedelta(hours=10),
        sleeps=[[(now - timedelta(hours=8)).isoformat(), (now - timedelta(hours=4)).isoformat()]],
    )
    [row] = [r for r in selectors.team_showback(viewer=people["alice"]) if r["team"] == "payments"]
    [shown] = row["environments"]
    assert shown["hours"] == Decimal("6.00")
    assert shown["spend"] == (env.hourly_cost * Decimal("6.00")).quantize(Decimal("0.01"))


@pytest.mark.django_db
def test_the_dashboards_month_leaves_the_sleeps_out_too(people, django_capture_on_commit_callbacks):
    env = ready_env(people, django_capture_on_commit_callbacks)
    now = timezone.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    ready = max(start, now - timedelta(hours=10))
    asleep_from = ready + (now - ready) / 4
    awake_from = ready + (now - ready) / 2  # asleep a quarter of what it has been ready
    Environment.objects.filter(pk=env.pk).update(
        hourly_cost=Decimal("4.00"),
        ready_at=ready,
        sleeps=[[asleep_from.isoformat(), awake_from.isoformat()]],
    )
    up = (now - ready).total_seconds() * 0.75 / 3600
    spent = selectors.spend_this_month(viewer=people["alice"])
    assert abs(float(spent) - 4 * up) < 0.05, (spent, up)


def test_the_migration_opens_a_sleeping_ones_sleep_and_closes_a_waking_ones_at_its_wake(
    people, django_capture_on_commit_callbacks
):
    migration = importlib.import_module("portal.migrations.0013_environment_sleeps")
    asleep = ready_env(people, django_capture_on_commit_callbacks)
    waking = ready_env(people, django_capture_on_commit_callbacks, name="other")
    early = ready_env(people, django_capture_on_commit_callbacks, name="early")
    slept, asked = at(0), at(8)
    Environment.objects.filter(pk=asleep.pk).update(status=Status.SLEEPING, slept_at=slept)
    Environment.objects.filter(pk=waking.pk).update(
        status=Status.WAKING, slept_at=slept, wake_requested_at=asked
    )
    # Asked to wake while still falling asleep: its wake began as soon as it was asleep.
    Environment.objects.filter(pk=early.pk).update(
        status=Status.WAKING, slept_at=slept, wake_requested_at=at(-1)
    )
    migration.current_sleeps(apps, None)
    for env in (asleep, waking, early):
        env.refresh_from_db()
    assert asleep.sleeps == [[slept.isoformat(), None]]
    # Its wake had begun: were it to fail, it would not be priced as asleep from then on.
    assert waking.sleeps == [[slept.isoformat(), asked.isoformat()]]
    assert early.sleeps == [[slept.isoformat(), slept.isoformat()]]


def test_the_progress_tab_lists_pipelines_in_the_order_they_ran(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    ProvisioningStep.objects.filter(environment=env).update(started_at=at(0))
    # Asleep at 5 h, awake at 6 h, torn down at 9 h: teardown lists last, not before the sleep.
    for name, hours in (("sleep-remember", 5), ("sleep-workloads", 5), ("wake-workloads", 6),
                        ("cordon", 9), ("delete-namespace", 9)):  # fmt: skip
        ProvisioningStep.objects.update_or_create(
            environment=env, name=name,
            defaults={"position": position_of(name), "started_at": at(hours), "status": "done"},
        )  # fmt: skip
    names = [s.name for s in selectors.environment_steps(env)]
    assert names.index("sleep-remember") < names.index("wake-workloads") < names.index("cordon")
    assert names[-1] == "delete-namespace" and names.index("compose") == 0
    # Provisioning lists first even when it failed before a step began (no start on record);
    # a pipeline that never did anything lists last.
    ProvisioningStep.objects.filter(environment=env, position__lt=10).update(
        started_at=None, finished_at=None
    )
    names = [s.name for s in selectors.environment_steps(env)]
    assert names[0] == "compose" and names[-1] == "delete-namespace"
