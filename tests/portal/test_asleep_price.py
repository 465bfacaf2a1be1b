"""What sleeping keeps is still paid (portal/uptime.py `environment_priced`): an environment with
a database is priced, for the hours it slept, at its database's price, on showback, the spend by
day, the dashboard's month, the cost tab and the budget forecast alike; one without a database
sleeps for free. The Sleep card said so already; the spend figures priced every sleep at zero."""

from __future__ import annotations

import importlib
from datetime import timedelta
from decimal import Decimal

import pytest
from django.apps import apps
from django.utils import timezone

from kiln.identity.models import Team
from portal import budget_math as bm
from portal import budget_reads, selectors, uptime
from portal.lifecycle import Status
from portal.models import Environment, TeamBudget
from portal.services import cost, environment_request_submit, sleep
from portal.services.sleep_triggers import sleep_schedule_set
from tests.portal.conftest import request_data
from tests.portal.test_lifecycle_notices import ready_env
from tests.portal.test_pages import login

pytestmark = pytest.mark.django_db
CENT = Decimal("0.01")


def asleep_half(env: Environment, *, hourly: str, kept: str) -> Environment:
    """Ten hours ready, the middle four asleep (closed), at the given prices."""
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(
        hourly_cost=Decimal(hourly),
        asleep_hourly_cost=Decimal(kept),
        ready_at=now - timedelta(hours=10),
        sleeps=[[(now - timedelta(hours=8)).isoformat(), (now - timedelta(hours=4)).isoformat()]],
    )
    env.refresh_from_db()
    return env


def test_a_request_with_a_database_stores_what_sleeping_keeps(
    people, django_capture_on_commit_callbacks
):
    with_db = ready_env(people, django_capture_on_commit_callbacks, database=True)
    without = ready_env(people, django_capture_on_commit_callbacks, name="plain")
    assert with_db.asleep_hourly_cost == cost.DATABASE_HOURLY["small"] > 0  # class dev: small
    assert without.asleep_hourly_cost == 0
    # The Sleep card's "kept" is the same figure.
    assert sleep.sleep_savings(with_db)["kept_hourly"] == with_db.asleep_hourly_cost


def test_every_spend_figure_prices_the_hours_asleep_at_what_sleeping_keeps(
    people, django_capture_on_commit_callbacks
):
    env = asleep_half(
        ready_env(people, django_capture_on_commit_callbacks, database=True),
        hourly="3.00",
        kept="0.50",
    )
    expected = Decimal("3.00") * 6 + Decimal("0.50") * 4  # 20.00
    priced = uptime.environment_priced(env, now=timezone.now())
    assert (priced.hours, priced.asleep_hours) == (Decimal("6.00"), Decimal("4.00"))
    assert priced.cost.quantize(CENT) == expected
    [row] = [r for r in selectors.team_showback(viewer=people["alice"]) if r["team"] == "payments"]
    [shown] = row["environments"]
    assert shown["spend"] == expected and shown["asleep_hours"] == Decimal("4.00")
    assert row["total"] == expected
    days = selectors.spend_by_day(viewer=people["alice"], days=2)
    assert abs(sum(d["spend"] for d in days) - expected) <= CENT  # rounded once a day
    month_start = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if env.ready_at >= month_start:  # ten hours back may fall in the month before
        assert abs(selectors.spend_this_month(viewer=people["alice"]) - expected) <= CENT
    assert budget_reads.environment_cost(environment=env)["so_far"] == expected


def test_without_a_database_a_sleep_costs_nothing(people, django_capture_on_commit_callbacks):
    env = asleep_half(
        ready_env(people, django_capture_on_commit_callbacks), hourly="3.00", kept="0"
    )
    assert uptime.environment_priced(env, now=timezone.now()).cost.quantize(CENT) == Decimal(
        "18.00"
    )


def test_the_forecast_keeps_paying_for_a_sleeping_environments_database(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks, database=True)
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(
        status=Status.SLEEPING,
        hourly_cost=Decimal("3.00"),
        asleep_hourly_cost=Decimal("0.50"),
        expires_at=now + timedelta(hours=10),
    )
    team = Team.objects.get(slug="payments")
    [running] = budget_reads.team_running(team=team, now=now)
    # Asleep with no schedule to wake it: ten hours at what sleeping keeps, not at zero and not
    # at its awake price.
    assert running.cost(now, now + timedelta(days=40)).quantize(CENT) == Decimal("5.00")
    TeamBudget.objects.create(team=team, monthly_amount=Decimal("1000"))
    month = budget_reads.team_month(team=team, now=now)
    _, end = bm.month_bounds(now)
    hours = min(Decimal(10), bm.hours_between(now, end))
    assert month.figures.forecast == bm.money(month.figures.spend + Decimal("0.50") * hours)


def test_the_migration_prices_an_earlier_environments_database_from_its_request(
    people, django_capture_on_commit_callbacks
):
    migration = importlib.import_module("portal.migrations.0014_environment_asleep_hourly_cost")
    with_db = ready_env(people, django_capture_on_commit_callbacks, database=True)
    staging, _ = environment_request_submit(  # waits for an approver: priced all the same
        actor=people["alice"], data=request_data(database=True, name="stage", env_class="staging")
    )
    without = ready_env(people, django_capture_on_commit_callbacks, name="plain")
    Environment.objects.update(asleep_hourly_cost=0)  # as before the field
    migration.kept_prices(apps, None)
    for env in (with_db, staging, without):
        env.refresh_from_db()
    assert with_db.asleep_hourly_cost == Decimal("0.0360")
    assert staging.asleep_hourly_cost == Decimal("0.1910")
    assert without.asleep_hourly_cost == 0
    # The migration's prices are the estimate's.
    assert {c: migration.DATABASE_HOURLY[s] for c, s in migration.DATABASE_SIZE.items()} == {
        c: cost.kept_asleep_hourly(env_class=c, database=True) for c in cost.DATABASE_SIZE
    }


@pytest.mark.parametrize(("trigger", "wakes"), [("schedule", True), ("inactivity", True),
                                               ("owner", False), ("budget", False)])  # fmt: skip
def test_under_a_schedule_the_forecast_wakes_only_what_the_schedule_would(
    people, django_capture_on_commit_callbacks, trigger, wakes
):
    """The schedule wakes what it or inactivity put to sleep; one a person or the budget put to
    sleep stays asleep, paying only for its database, until someone wakes it."""
    env = ready_env(people, django_capture_on_commit_callbacks, database=True)
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(
        status=Status.SLEEPING,
        sleep_trigger=trigger,
        hourly_cost=Decimal("3.00"),
        asleep_hourly_cost=Decimal("0.50"),
        expires_at=now + timedelta(days=7),
    )
    team = Team.objects.get(slug="payments")
    every_day = {"days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]}
    sleep_schedule_set(
        actor=people["alice"], team=team, time_zone="UTC",
        wake_windows=[{**every_day, "start": "08:00", "end": "20:00"}],
    )  # fmt: skip
    [running] = budget_reads.team_running(team=team, now=now)
    week = running.cost(now, now + timedelta(days=7))
    # A week: 84 hours awake and 84 asleep under the schedule, or all 168 asleep.
    expected = Decimal("3.00") * 84 + Decimal("0.50") * 84 if wakes else Decimal("0.50") * 168
    assert abs(week - expected) < Decimal("0.01"), (trigger, week)


def test_the_cost_tab_says_how_the_hours_left_are_priced(
    people, django_capture_on_commit_callbacks
):
    """'If it runs to its expiry' names the hours awake and asleep it counts, so the sum can be
    followed: a sleeping environment left asleep pays only what sleeping keeps."""
    env = ready_env(people, django_capture_on_commit_callbacks, database=True)
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(
        status=Status.SLEEPING,
        sleep_trigger="owner",
        hourly_cost=Decimal("3.00"),
        asleep_hourly_cost=Decimal("0.50"),
        ready_at=now,
        expires_at=now + timedelta(hours=10),
    )
    env.refresh_from_db()
    figures = budget_reads.environment_cost(environment=env, now=now)
    assert (figures["awake_left"], figures["asleep_left"]) == (Decimal("0.0"), Decimal("10.0"))
    assert figures["to_expiry"] == figures["so_far"] + Decimal("5.00")
    page = login("alice-page", "engineer", Team.objects.get(slug="payments")).get(f"/environments/{env.public_id}/").content.decode()
    assert "10.0 h asleep at $0.5000, unless someone wakes it" in page
