"""One cost story on the pages: the request form's estimate against the team's budget, the queue's
"forecast over budget by", the environment page's cost to expiry and the showback month chart."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from kiln.identity.models import Team
from portal.lifecycle import Status
from portal.models import Environment, TeamBudget
from portal.services import environment_request_submit
from tests.portal.conftest import make_person, request_data
from tests.portal.test_pages import FORM, login

pytestmark = pytest.mark.django_db

# Mid-month: a month's forecast counts only the hours left in it, so in its last minutes a
# request costs a cent or less and no budget is met; and the forecast's daily points differ by
# $24 exactly only where the float sums allow, which depends on the day and the minute.
MID_MONTH = datetime(2026, 11, 16, 12, 0, tzinfo=UTC)


@pytest.fixture
def team(db) -> Team:
    return Team.objects.create(slug="payments", name="Payments")


def _budget(team: Team, amount: str) -> TeamBudget:
    return TeamBudget.objects.create(team=team, monthly_amount=Decimal(amount), currency="USD")


def _estimate(client, **overrides) -> str:
    query = {**FORM, "env_class": "dev", **overrides}
    return client.get(reverse("portal:environment-estimate"), query).content.decode()


def test_the_estimate_meets_the_teams_remaining_budget(team, clock):
    clock.current = MID_MONTH
    alice = login("alice", "engineer", team)
    assert "left after its forecast" not in _estimate(alice)  # no budget: the price alone
    _budget(team, "100000.00")
    fits = _estimate(alice)
    assert 'data-budget-outcome="fits"' in fits and "USD 100000.00" in fits
    TeamBudget.objects.filter(team=team).update(monthly_amount=Decimal("0.01"))
    over = _estimate(alice)
    assert 'data-budget-outcome="over"' in over and "Forecast over budget by USD" in over
    TeamBudget.objects.filter(team=team).update(monthly_amount=Decimal("0.00"))
    refused = _estimate(alice)
    assert 'data-budget-outcome="refused"' in refused and "refused" in refused
    # The policy line beside it no longer reads a plain "allowed": the budget refuses it.
    query = {**FORM, "env_class": "dev"}
    check = alice.get(reverse("portal:environment-policy-check"), query).content.decode()
    assert "refused by the budget" in check and 'class="badge ok"' not in check
    TeamBudget.objects.filter(team=team).update(monthly_amount=Decimal("100000.00"))
    check = alice.get(reverse("portal:environment-policy-check"), query).content.decode()
    assert "refused by the budget" not in check and 'class="badge ok">allowed' in check
    TeamBudget.objects.filter(team=team).update(monthly_amount=Decimal("0.00"))
    # The full form carries the same line.
    page = alice.get(reverse("portal:environment-request")).content.decode()
    assert "portal/budget.css" in page


def test_the_estimate_says_nothing_of_a_team_the_viewer_does_not_see(team):
    other = Team.objects.create(slug="search", name="Search")
    _budget(other, "0.00")
    alice = login("alice", "engineer", team)
    assert "data-budget-outcome" not in _estimate(alice, team="search")


def test_the_queue_shows_how_far_a_request_takes_the_forecast_over(team, clock):
    clock.current = MID_MONTH
    engineer = make_person("erin", {"engineer"}, team)
    _budget(team, "0.01")
    env, _ = environment_request_submit(actor=engineer, data=request_data(name="big"))
    assert env.status == Status.PENDING_APPROVAL
    carol = login("carol", "approver", team)
    page = carol.get(reverse("portal:approval-queue")).content.decode()
    assert "forecast over budget by $" in page and "q-over-budget" in page


def test_the_environment_page_shows_cost_so_far_to_expiry_and_the_budget(team, clock):
    # The page reads the same instant as the test: at $2/h, nine seconds between the two is a
    # cent, and a slow request took that long.
    clock.current = MID_MONTH
    engineer = make_person("erin", {"engineer"}, team)
    env, _ = environment_request_submit(actor=engineer, data=request_data(name="web"))
    now = clock.current
    Environment.objects.filter(pk=env.pk).update(
        status=Status.READY,
        hourly_cost=Decimal("2.0000"),
        ready_at=now - timedelta(hours=3),
        expires_at=now + timedelta(hours=10),
    )
    _budget(team, "500.00")
    alice = login("alice", "engineer", team)
    page = alice.get(reverse("portal:environment-detail", args=[env.public_id])).content.decode()
    # 3 h up at $2 = $6 so far; 10 h more to its expiry: $26.
    assert 'id="cost-so-far">$6.00' in page
    assert 'id="cost-to-expiry">$26.00' in page
    assert 'id="cost-budget"' in page and "of 500.00" in page
    # Asleep for 2 of those hours: $2 so far, and the figure to its expiry builds on that one.
    slept = [(now - timedelta(hours=2)).isoformat(), now.isoformat()]
    Environment.objects.filter(pk=env.pk).update(sleeps=[slept])
    page = alice.get(reverse("portal:environment-detail", args=[env.public_id])).content.decode()
    assert 'id="cost-so-far">$2.00' in page
    assert 'id="cost-to-expiry">$22.00' in page


def test_showback_draws_spend_forecast_and_budget_for_the_teams_month(team, clock):
    clock.current = MID_MONTH
    engineer = make_person("erin", {"engineer"}, team)
    env, _ = environment_request_submit(actor=engineer, data=request_data(name="web"))
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(
        status=Status.READY,
        hourly_cost=Decimal("1.0000"),
        ready_at=now,
        expires_at=now + timedelta(days=400),
    )
    _budget(team, "250.00")
    other = Team.objects.create(slug="search", name="Search")
    _budget(other, "99.00")
    alice = login("alice", "engineer", team)
    page = alice.get(reverse("portal:showback")).content.decode()
    assert 'id="budget-chart-payments"' in page and "vendor/uplot.iife.min.js" in page
    assert 'id="budget-chart-search"' not in page  # another team's budget is not shown
    start = page.index('id="budget-data-payments"')
    data = json.loads(page[page.index(">", start) + 1 : page.index("</script>", start)])
    assert len(data["days"]) == len(data["spend"]) == len(data["forecast"]) == len(data["budget"])
    assert 28 <= len(data["days"]) <= 31 and set(data["budget"]) == {250.0}
    # The forecast runs from today to the month's end, growing by $24 a day ($1/h).
    future = [f for f in data["forecast"] if f is not None]
    assert len(future) >= 2 and future == sorted(future)
    assert future[-1] - future[-2] == pytest.approx(24.0)


def test_a_raw_team_value_that_is_no_teams_name_shows_no_budget_and_no_error(team):
    _budget(team, "10.00")
    alice = login("alice", "engineer", team)
    for raw in ("PAYMENTS", "pay ments", "x" * 300):
        page = alice.get(reverse("portal:environment-estimate"), {**FORM, "team": raw})
        assert page.status_code == 200 and "data-budget-outcome" not in page.content.decode()
    # A NUL never reaches a query: the form page answers its own way (re-rendered), never 500.
    form = alice.post(reverse("portal:environment-request"), {**FORM, "team": "pay\x00ments"})
    assert form.status_code in (200, 400)


def test_a_month_past_its_warning_still_says_its_forecast_is_over():
    from types import SimpleNamespace

    from django.template.loader import render_to_string

    figures = SimpleNamespace(
        state="warning", percent_spent=80, forecast_over=Decimal("372.62"), spend="0.04",
        forecast="372.67", budget="0.05", remaining="0.00",
    )  # fmt: skip
    month = SimpleNamespace(
        figures=figures, team=SimpleNamespace(slug="payments"), currency="USD", raised=0,
        month=date(2026, 12, 1), raises=[],
    )  # fmt: skip
    b = {"month": month, "chart": {}, "chart_id": "budget-data-payments", "series": []}
    html = render_to_string("portal/_budget_month.html", {"b": b})
    assert "80% spent · forecast over" in html
    assert "The forecast passes the budget" in html
