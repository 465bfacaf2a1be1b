"""The budgets API (/api/v1/teams/<slug>/budget/): who reads, who sets and raises, bad input, and
a request refused at the budget with the figures."""

from __future__ import annotations

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from audit.models import OutboxEvent
from kiln.identity.models import Team
from portal.models import BudgetRaise, Environment, TeamBudget
from tests.portal.conftest import request_data

pytestmark = pytest.mark.django_db
URL = "/api/v1/teams/payments/budget/"
RAISE = "/api/v1/teams/payments/budget/raise/"


@pytest.fixture
def admin(api):
    return api("platform-admin", sub="root")


def test_anonymous_is_401_and_a_role_less_token_403(api):
    assert APIClient().get(URL).status_code == 401
    assert api(sub="nobody").get(URL).status_code == 403


def test_admin_sets_and_the_team_reads_it_another_team_does_not(api, admin):
    r = admin.put(URL, {"monthly_amount": "500.00", "warn_percent": 70}, format="json")
    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["budget"], body["currency"], body["warn_percent"], body["state"]) == (
        "500.00", "USD", 70, "ok",
    )  # fmt: skip
    assert (body["spend"], body["forecast"], body["remaining"]) == ("0.00", "0.00", "500.00")
    mine = api("engineer", sub="alice", team="payments").get(URL)
    assert mine.status_code == 200 and mine.json()["budget"] == "500.00"
    # Another team's engineer: the same 404 as a team that does not exist.
    other = api("engineer", sub="bob", team="search")
    assert other.get(URL).status_code == 404
    assert other.get("/api/v1/teams/nope/budget/").status_code == 404


def test_a_team_without_a_budget_is_404(api, admin):
    r = admin.get(URL)
    assert r.status_code == 404 and "no budget" in r.json()["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"monthly_amount": "100", "currency": "EUR"}, "currency"),
        ({"monthly_amount": "-5"}, "monthly_amount"),
        ({"monthly_amount": -5}, "monthly_amount"),
        ({"monthly_amount": "100", "warn_percent": 0}, "warn_percent"),
        ({"monthly_amount": "100", "owner": "x"}, "owner"),  # unknown fields are refused
        # More digits than a Decimal context can round to cents: once a 500.
        ({"monthly_amount": "1e40"}, "monthly_amount"),
        ({"monthly_amount": "10000000000000000000000000000"}, "monthly_amount"),
        ({"monthly_amount": "-1e30"}, "monthly_amount"),
    ],
    ids=[
        "other-currency",
        "negative-string",
        "negative-number",
        "warn-0",
        "unknown-field",
        "1e40",
        "29-digits",
        "minus-1e30",
    ],  # fmt: skip
)
def test_bad_budget_is_400_naming_the_field_and_changes_nothing(admin, body, field):
    r = admin.put(URL, body, format="json")
    assert r.status_code == 400, r.content
    assert field in r.json()["extra"]["fields"]
    assert not TeamBudget.objects.exists()
    assert not OutboxEvent.objects.filter(action__startswith="portal.budget.").exists()


def test_a_raise_of_more_digits_than_cents_can_hold_is_a_400(admin):
    admin.put(URL, {"monthly_amount": "100"}, format="json")
    r = admin.post(RAISE, {"amount": "1e40", "reason": "launch"}, format="json")
    assert r.status_code == 400 and "amount" in r.json()["extra"]["fields"]
    assert not BudgetRaise.objects.exists()


def test_raises_may_not_take_the_months_budget_past_what_is_stored(admin):
    admin.put(URL, {"monthly_amount": "9999999000.00"}, format="json")
    assert admin.post(RAISE, {"amount": "900.00", "reason": "a"}, format="json").status_code == 201
    r = admin.post(RAISE, {"amount": "100.00", "reason": "b"}, format="json")
    assert r.status_code == 400
    (said,) = r.json()["extra"]["fields"]["amount"]
    assert "at most 99.99 more" in said
    assert BudgetRaise.objects.count() == 1


def test_engineers_and_approvers_may_not_set_or_raise(api, admin):
    admin.put(URL, {"monthly_amount": "100"}, format="json")
    for role, sub in (("engineer", "alice"), ("approver", "carol")):
        client = api(role, sub=sub, team="payments")
        assert client.put(URL, {"monthly_amount": "1"}, format="json").status_code == 403
        r = client.post(RAISE, {"amount": "50", "reason": "launch"}, format="json")
        assert r.status_code == 403
    assert TeamBudget.objects.get().monthly_amount == Decimal("100.00")
    assert not BudgetRaise.objects.exists()


def test_raise_with_a_reason_raises_this_months_budget(admin):
    admin.put(URL, {"monthly_amount": "100"}, format="json")
    r = admin.post(RAISE, {"amount": "25.50", "reason": ""}, format="json")
    assert r.status_code == 400 and "reason" in r.json()["extra"]["fields"]
    r = admin.post(RAISE, {"amount": "25.50", "reason": "launch week"}, format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert (body["raised"], body["budget"]) == ("25.50", "125.50")
    assert body["raises"][0]["reason"] == "launch week" and body["raises"][0]["raised_by"] == "root"


def test_a_request_at_the_budget_is_409_with_the_figures(api, admin):
    admin.put(URL, {"monthly_amount": "0"}, format="json")
    alice = api("engineer", sub="alice", team="payments")
    r = alice.post("/api/v1/environments/", request_data(name="late"), format="json")
    assert r.status_code == 409, r.content
    body = r.json()
    assert body["code"] == "budget_exhausted"
    assert (body["extra"]["spend"], body["extra"]["budget"]) == ("0.00", "0.00")
    assert "forecast" in body["extra"] and not Environment.objects.exists()
    assert Team.objects.filter(slug="payments").exists()


def test_a_budget_set_after_raises_must_leave_room_for_them(admin):
    admin.put(URL, {"monthly_amount": "100"}, format="json")
    assert admin.post(RAISE, {"amount": "900.00", "reason": "a"}, format="json").status_code == 201
    r = admin.put(URL, {"monthly_amount": "9999999999.99"}, format="json")
    assert r.status_code == 400 and "at most 9999999099.99 more" not in str(r.json())
    assert "monthly_amount" in r.json()["extra"]["fields"]
    assert TeamBudget.objects.get().monthly_amount == Decimal("100.00")
