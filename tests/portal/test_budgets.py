"""Team budgets (portal/services/budgets.py): set and raise, spend as showback prices it, requests
escalated or refused with the figures, thresholds told once, and the API's edges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from audit.models import OutboxEvent
from kiln.errors import Conflict, Forbidden, InvalidInput
from portal import budget_math as bm
from portal import budget_reads
from portal.lifecycle import Status
from portal.models import (
    BudgetNotice,
    BudgetRaise,
    Environment,
    EnvironmentRequest,
    Notification,
    SleepSchedule,
    TeamBudget,
    TeamWebhook,
)
from portal.services import budgets, environment_request_submit
from scheduler.models import InstanceType, NodeLifetime
from tests.portal.conftest import request_data

pytestmark = pytest.mark.django_db


def _budget(team, amount="100.00", warn=80) -> TeamBudget:
    return TeamBudget.objects.create(
        team=team, monthly_amount=Decimal(amount), currency="USD", warn_percent=warn
    )


def _priced() -> None:
    InstanceType.objects.create(
        name="m6i.xlarge", family="m6i", vcpu=4, memory_gib=Decimal("16"),
        on_demand_hourly=Decimal("0.5000"),
    )  # fmt: skip


def _ready_env(
    people, name: str, *, hourly="1.0000", ready_at=None, expires_at=None
) -> Environment:
    env, _ = environment_request_submit(actor=people["alice"], data=request_data(name=name))
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(
        status=Status.READY,
        hourly_cost=Decimal(hourly),
        created_at=(ready_at or now) - timedelta(minutes=5),
        ready_at=ready_at or now,
        expires_at=expires_at,
    )
    env.refresh_from_db()
    return env


# --- setting and raising ------------------------------------------------------------------


def test_platform_admin_sets_a_budget_audited(people, teams):
    budget = budgets.team_budget_set(
        actor=people["root"], team=teams["payments"], monthly_amount="250.50", warn_percent=75
    )
    assert (budget.monthly_amount, budget.currency, budget.warn_percent) == (
        Decimal("250.50"), "USD", 75,
    )  # fmt: skip
    (event,) = OutboxEvent.objects.filter(action="portal.budget.set")
    assert event.target == "kiln.team:payments" and event.data["monthly_amount"] == "250.50"
    assert event.actor == "root"


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("currency", {"monthly_amount": "100", "currency": "EUR"}),
        ("monthly_amount", {"monthly_amount": "-1"}),
        ("monthly_amount", {"monthly_amount": "10.001"}),
        ("monthly_amount", {"monthly_amount": "lots"}),
        ("warn_percent", {"monthly_amount": "100", "warn_percent": 0}),
        ("warn_percent", {"monthly_amount": "100", "warn_percent": 101}),
    ],
    ids=["other-currency", "negative", "three-decimals", "not-a-number", "warn-0", "warn-101"],
)
def test_bad_budget_is_refused_naming_the_field_and_changes_nothing(people, teams, field, kwargs):
    _budget(teams["payments"], "100.00")
    with pytest.raises(InvalidInput) as exc:
        budgets.team_budget_set(actor=people["root"], team=teams["payments"], **kwargs)
    assert field in exc.value.extra["fields"]
    assert TeamBudget.objects.get(team=teams["payments"]).monthly_amount == Decimal("100.00")
    assert not OutboxEvent.objects.filter(action__startswith="portal.budget.").exists()


def test_only_platform_admins_set_or_raise_budgets(people, teams):
    _budget(teams["payments"])
    for who in ("alice", "carol"):
        with pytest.raises(Forbidden):
            budgets.team_budget_set(actor=people[who], team=teams["payments"], monthly_amount="1")
        with pytest.raises(Forbidden):
            budgets.team_budget_raise(
                actor=people[who], team=teams["payments"], amount="10", reason="demo"
            )
    assert TeamBudget.objects.get(team=teams["payments"]).monthly_amount == Decimal("100.00")
    assert not BudgetRaise.objects.exists()


def test_raise_for_the_month_needs_a_reason_and_a_positive_amount(people, teams):
    _budget(teams["payments"], "100.00")
    for kwargs, field in (
        ({"amount": "50", "reason": "  "}, "reason"),
        ({"amount": "0", "reason": "launch"}, "amount"),
        ({"amount": "-5", "reason": "launch"}, "amount"),
    ):
        with pytest.raises(InvalidInput) as exc:
            budgets.team_budget_raise(actor=people["root"], team=teams["payments"], **kwargs)
        assert field in exc.value.extra["fields"]
    assert not BudgetRaise.objects.exists()
    budgets.team_budget_raise(
        actor=people["root"], team=teams["payments"], amount="50.25", reason="launch week"
    )
    month = budget_reads.team_month(team=teams["payments"])
    assert (month.raised, month.figures.budget) == (Decimal("50.25"), Decimal("150.25"))
    (event,) = OutboxEvent.objects.filter(action="portal.budget.raised")
    assert event.data["reason"] == "launch week" and event.data["amount"] == "50.25"


def test_raising_a_team_without_a_budget_is_a_conflict(people, teams):
    with pytest.raises(Conflict):
        budgets.team_budget_raise(
            actor=people["root"], team=teams["search"], amount="5", reason="why not"
        )
    assert not BudgetRaise.objects.exists()


# --- spend and forecast -------------------------------------------------------------------


def test_spend_is_what_ran_this_month_priced_and_forecast_adds_what_runs(people, teams):
    _priced()
    now = datetime(2026, 3, 11, 12, 0, tzinfo=UTC)
    start, end = bm.month_bounds(now)
    env = _ready_env(people, "web", hourly="2.0000", ready_at=start, expires_at=None)
    Environment.objects.filter(pk=env.pk).update(created_at=start - timedelta(days=3))
    # One node ran before the month (not this month's) and into it; one is up since the start.
    NodeLifetime.objects.create(
        name="ip-a", environment=env.namespace, instance_type="m6i.xlarge", capacity_type="on-demand",
        launched_at=start - timedelta(hours=10), removed_at=start,
    )  # fmt: skip
    NodeLifetime.objects.create(
        name="ip-b", environment=env.namespace, instance_type="m6i.xlarge", capacity_type="on-demand",
        launched_at=start,
    )  # fmt: skip
    _budget(teams["payments"], "1000.00")
    month = budget_reads.team_month(team=teams["payments"], now=now)
    # Spend: ip-b since the month's start, 252 h at $0.50/h = $126; ip-a ran only before it.
    assert month.figures.spend == Decimal("126.00")
    # Forecast: + $2/h (the environment's price) for the 492 h left in March: 126 + 984 = $1110.
    assert month.figures.forecast == Decimal("1110.00")
    assert month.figures.state == "over" and month.figures.remaining == Decimal("-110.00")
    assert month.as_dict()["currency"] == "USD" and month.as_dict()["team"] == "payments"


# --- requests -----------------------------------------------------------------------------


def test_request_over_the_forecast_waits_for_an_approver_with_the_cost_shown(people, teams, clock):
    # Mid-month: in a month's last minutes a request's cost for the month is a cent or less.
    clock.current = datetime(2026, 11, 16, 12, 0, tzinfo=UTC)
    _budget(teams["payments"], "0.01")  # any request's cost takes the forecast over
    env, created = environment_request_submit(actor=people["alice"], data=request_data(name="a"))
    assert created and env.status == Status.PENDING_APPROVAL  # dev, yet not approved automatically
    assert "forecast over budget by" in env.status_reason
    (event,) = OutboxEvent.objects.filter(action="portal.environment.submitted")
    assert Decimal(event.data["budget"]["over_by"]) > 0
    over = budget_reads.pending_over_budget(environment=env)
    assert over == Decimal(event.data["budget"]["over_by"])


def test_request_within_budget_is_approved_automatically(people, teams):
    _budget(teams["payments"], "100000.00")
    env, _ = environment_request_submit(actor=people["alice"], data=request_data(name="b"))
    assert env.status in (Status.APPROVED, Status.PROVISIONING, Status.READY)
    assert budget_reads.pending_over_budget(environment=env) is None


def test_request_at_the_budget_is_refused_with_the_figures_and_nothing_is_created(people, teams):
    _budget(teams["payments"], "0.00")  # spent from the start
    with pytest.raises(budgets.BudgetExhausted) as exc:
        environment_request_submit(actor=people["alice"], data=request_data(name="c"))
    assert exc.value.http_status == 409 and exc.value.code == "budget_exhausted"
    assert {"spend", "forecast", "budget", "currency"} <= set(exc.value.extra)
    assert exc.value.extra["budget"] == "0.00"
    assert not EnvironmentRequest.objects.exists() and not Environment.objects.exists()
    (refused,) = OutboxEvent.objects.filter(action="portal.budget.request_refused")
    assert refused.actor == "alice" and refused.target == "kiln.team:payments"


def test_a_team_without_a_budget_is_not_checked(people, teams):
    env, _ = environment_request_submit(actor=people["bob"], data=request_data(team="search"))
    assert env.status != Status.PENDING_APPROVAL


# --- the pass -----------------------------------------------------------------------------


def test_thresholds_are_told_once_per_month_audited_and_posted(people, teams):
    _priced()
    now = datetime(2026, 3, 11, 12, 0, tzinfo=UTC)
    start, _ = bm.month_bounds(now)
    env = _ready_env(people, "web", ready_at=start, expires_at=now + timedelta(hours=1))
    Environment.objects.filter(pk=env.pk).update(created_at=start)
    # 10 days 12 h at $0.50/h: $126.00 spent by now.
    NodeLifetime.objects.create(
        name="ip-a", environment=env.namespace, instance_type="m6i.xlarge", capacity_type="on-demand",
        launched_at=start, removed_at=now,
    )  # fmt: skip
    TeamWebhook.objects.create(team=teams["payments"], url="http://127.0.0.1:9/hook")
    _budget(teams["payments"], "200.00", warn=80)
    # $126 is 63% of $200: nothing crossed, nothing written.
    assert budgets.budgets_enforce(now=now, dry_run=False)["told"] == {}
    assert not BudgetNotice.objects.exists()
    # $126 is 84% of $150: the warning, once.
    TeamBudget.objects.filter(team=teams["payments"]).update(monthly_amount=Decimal("150.00"))
    assert budgets.budgets_enforce(now=now, dry_run=True)["told"] == {"payments": [80]}
    assert not BudgetNotice.objects.exists()  # a dry run writes nothing
    assert budgets.budgets_enforce(now=now, dry_run=False)["told"] == {"payments": [80]}
    assert budgets.budgets_enforce(now=now, dry_run=False)["told"] == {}  # once per month
    (notice,) = BudgetNotice.objects.all()
    assert (notice.threshold, notice.month, notice.spend) == (80, start.date(), Decimal("126.00"))
    (event,) = OutboxEvent.objects.filter(action="portal.budget.threshold_crossed")
    assert event.actor == "system:budget-keeper" and event.data["threshold"] == 80
    (note,) = Notification.objects.filter(kind="budget_warning")
    assert note.environment is None and "payments has spent 126.00 USD" in note.payload["text"]
    # The next month starts untold.
    later = datetime(2026, 4, 2, tzinfo=UTC)
    assert (
        budget_reads.budget_notices(team=teams["payments"], month=bm.month_bounds(later)[0]) == []
    )


def test_forecast_applies_the_teams_sleep_schedule(people, teams):
    now = datetime(2026, 3, 9, 0, 0, tzinfo=UTC)  # a Monday
    env = _ready_env(people, "web", hourly="1.0000", ready_at=now, expires_at=None)
    Environment.objects.filter(pk=env.pk).update(created_at=now)
    _budget(teams["payments"], "1000.00")
    SleepSchedule.objects.create(
        team=teams["payments"],
        time_zone="UTC",
        wake_windows=[
            {"days": ["mon", "tue", "wed", "thu", "fri"], "start": "09:00", "end": "17:00"}
        ],
    )
    # Awake 8 h on each weekday from 9 March to the month's end: 17 weekdays x 8 h x $1 = $136.
    assert budget_reads.team_month(team=teams["payments"], now=now).figures.forecast == Decimal(
        "136.00"
    )
    # A sleeping environment the schedule put to sleep counts too: the schedule wakes it.
    Environment.objects.filter(pk=env.pk).update(status=Status.SLEEPING, sleep_trigger="schedule")
    assert budget_reads.team_month(team=teams["payments"], now=now).figures.forecast == Decimal(
        "136.00"
    )
    # Without a schedule a sleeping one costs nothing until someone wakes it.
    SleepSchedule.objects.filter(team=teams["payments"]).update(enabled=False)
    assert budget_reads.team_month(team=teams["payments"], now=now).figures.forecast == 0


def test_at_the_budget_idle_environments_are_put_to_sleep_first(
    people, teams, settings, django_capture_on_commit_callbacks
):
    settings.KILN_BUDGET_IDLE_SECONDS = 3600
    with django_capture_on_commit_callbacks(execute=True):
        idle, _ = environment_request_submit(actor=people["alice"], data=request_data(name="idle"))
        busy, _ = environment_request_submit(actor=people["alice"], data=request_data(name="busy"))
    idle.refresh_from_db()
    busy.refresh_from_db()
    assert (idle.status, busy.status) == (Status.READY, Status.READY)
    now = timezone.now()
    Environment.objects.filter(pk=idle.pk).update(last_activity_at=now - timedelta(hours=3))
    Environment.objects.filter(pk=busy.pk).update(last_activity_at=now - timedelta(minutes=5))
    _budget(teams["payments"], "0.00")  # spent: the budget is reached
    with django_capture_on_commit_callbacks(execute=True):
        out = budgets.budgets_enforce(now=now)
    assert out["slept"] == {"payments": [idle.public_id]}
    assert out["told"] == {"payments": [80, 100]}
    idle.refresh_from_db()
    busy.refresh_from_db()
    assert idle.status in (Status.SLEEPING,) and idle.sleep_trigger == "budget"
    assert busy.status == Status.READY
    (slept,) = OutboxEvent.objects.filter(
        action="portal.environment.sleep_started", target=f"portal.environment:{idle.public_id}"
    )
    assert slept.actor == "system:budget-keeper" and "reached its budget" in slept.data["reason"]
    # A second pass: the thresholds were told, the idle one already sleeps: nothing more.
    again = budgets.budgets_enforce(now=now)
    assert again == {"told": {}, "slept": {}}


def test_the_teams_members_see_the_highest_threshold_on_their_attention_list(people, teams, clock):
    from portal.attention import my_teams_budgets

    clock.current = datetime(2026, 11, 16, 12, 0, tzinfo=UTC)  # not across a month's end
    now = clock.current
    month = bm.month_bounds(now)[0].date()
    for threshold in (80, 100):
        BudgetNotice.objects.create(
            team=teams["payments"], month=month, threshold=threshold,
            spend=Decimal("100.00"), forecast=Decimal("140.00"), budget=Decimal("100.00"),
        )  # fmt: skip
    (item,) = my_teams_budgets(people["alice"])
    assert item.kind == "budget" and item.title == "payments has reached its budget"
    assert "new requests are refused" in item.detail and item.url.endswith("?team=payments")
    assert my_teams_budgets(people["bob"]) == []  # another team's budget
