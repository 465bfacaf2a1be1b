"""The budgets admin: platform admins set and raise through the services (audited); bad input is
a form error that changes nothing; approvers may not."""

from __future__ import annotations

from decimal import Decimal

import pytest

from audit.models import OutboxEvent
from portal.models import BudgetRaise, TeamBudget
from tests.portal.test_admin import staff

pytestmark = pytest.mark.django_db
BUDGETS = "/admin/portal/teambudget/"
RAISES = "/admin/portal/budgetraise/"


def test_platform_admin_sets_and_raises_a_budget_in_admin(teams):
    root = staff("root", "platform-admin")
    form = {"team": teams["payments"].pk, "monthly_amount": "300.00", "currency": "USD",
            "warn_percent": "75"}  # fmt: skip
    response = root.post(f"{BUDGETS}add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    budget = TeamBudget.objects.get()
    assert (budget.monthly_amount, budget.warn_percent) == (Decimal("300.00"), 75)
    assert OutboxEvent.objects.filter(action="portal.budget.set", actor="root").count() == 1
    raised = root.post(
        f"{RAISES}add/", {"team": teams["payments"].pk, "amount": "40.00", "reason": "launch"}
    )
    assert raised.status_code == 302
    (row,) = BudgetRaise.objects.all()
    assert (row.amount, row.raised_by_name) == (Decimal("40.00"), "root")
    assert OutboxEvent.objects.filter(action="portal.budget.raised").count() == 1


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"monthly_amount": "300.00", "currency": "EUR"}, "platform&#x27;s currency, USD"),
        ({"monthly_amount": "-1", "currency": "USD"}, "cannot be negative"),
        (
            {"monthly_amount": "300.00", "currency": "USD", "warn_percent": "150"},
            "The warning percentage is from 1 to 100.",
        ),
        (
            {"monthly_amount": "300.00", "currency": "USD", "warn_percent": "-5"},
            "The warning percentage is from 1 to 100.",
        ),
        ({"monthly_amount": "1e400", "currency": "USD"}, "At most 9999999999.99."),
        ({"monthly_amount": "12.345", "currency": "USD"}, "At most two decimal places"),
        ({"monthly_amount": "a lot", "currency": "USD"}, "Type an amount such as 1200"),
    ],
    ids=[
        "other-currency",
        "negative",
        "warn-percent",
        "warn-negative",
        "too-large",
        "cents",
        "not-a-number",
    ],  # fmt: skip
)
def test_bad_budget_in_admin_is_a_form_error_and_changes_nothing(teams, form, message):
    root = staff("root", "platform-admin")
    response = root.post(
        f"{BUDGETS}add/", {"team": teams["payments"].pk, "warn_percent": "80", **form}
    )
    assert response.status_code == 200 and message in response.content.decode()
    assert "Constraint" not in response.content.decode()
    assert not TeamBudget.objects.exists()
    assert not OutboxEvent.objects.filter(action__startswith="portal.budget.").exists()


def test_raise_without_a_reason_or_a_budget_is_refused(teams):
    root = staff("root", "platform-admin")
    no_budget = root.post(
        f"{RAISES}add/", {"team": teams["search"].pk, "amount": "5", "reason": "x"}
    )
    assert no_budget.status_code == 200 and "has no budget" in no_budget.content.decode()
    TeamBudget.objects.create(team=teams["payments"], monthly_amount=Decimal("10"), currency="USD")
    blank = root.post(f"{RAISES}add/", {"team": teams["payments"].pk, "amount": "5", "reason": " "})
    assert blank.status_code == 200
    assert not BudgetRaise.objects.exists()


def test_approvers_may_not_set_budgets_in_admin(teams):
    carol = staff("carol", "approver", "payments")
    response = carol.post(
        f"{BUDGETS}add/",
        {
            "team": teams["payments"].pk,
            "monthly_amount": "1",
            "currency": "USD",
            "warn_percent": "80",
        },
    )
    assert response.status_code == 403
    assert not TeamBudget.objects.exists()


def test_amounts_are_typed_as_text_so_the_server_says_what_is_wrong(teams):
    # A browser's number field empties what it cannot read (1e400): the form would say
    # "required" instead of why. The amount is text the server checks, typed on a decimal pad.
    root = staff("root", "platform-admin")
    for page in (f"{BUDGETS}add/", f"{RAISES}add/"):
        html = root.get(page).content.decode()
        assert 'inputmode="decimal"' in html and 'type="number" name="monthly_amount"' not in html
        assert 'type="number" name="amount"' not in html


@pytest.mark.parametrize("team", ["payments", "search"], ids=["with-budget", "without-budget"])
def test_a_raise_that_is_not_positive_says_so_in_words(teams, team):
    root = staff("root", "platform-admin")
    TeamBudget.objects.create(team=teams["payments"], monthly_amount=Decimal("10"), currency="USD")
    response = root.post(
        f"{RAISES}add/", {"team": teams[team].pk, "amount": "-500", "reason": "launch"}
    )
    page = response.content.decode()
    assert response.status_code == 200 and "A raise must be more than 0." in page
    assert "Constraint" not in page and "portal_budget_raise_positive" not in page
    assert not BudgetRaise.objects.exists()


def test_a_raise_typed_in_exponent_form_is_confirmed_as_stored(teams):
    root = staff("root", "platform-admin")
    TeamBudget.objects.create(team=teams["payments"], monthly_amount=Decimal("10"), currency="USD")
    response = root.post(
        f"{RAISES}add/",
        {"team": teams["payments"].pk, "amount": "1e5", "reason": "launch"},
        follow=True,
    )
    page = response.content.decode()
    assert "payments +100000.00 for" in page and "1E+5" not in page
    assert BudgetRaise.objects.get().amount == Decimal("100000.00")


def test_a_raise_past_what_is_stored_is_a_field_error_in_admin(teams):
    root = staff("root", "platform-admin")
    TeamBudget.objects.create(
        team=teams["payments"], monthly_amount=Decimal("9999999000.00"), currency="USD"
    )
    response = root.post(
        f"{RAISES}add/", {"team": teams["payments"].pk, "amount": "1000", "reason": "launch"}
    )
    assert response.status_code == 200
    assert "at most 999.99 more" in response.content.decode()
    assert not BudgetRaise.objects.exists()
