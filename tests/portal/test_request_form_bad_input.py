"""The request form, its live estimate and its policy check, sent a NUL or an over-long value in
each field by a signed-in engineer: the form answers with its errors (or a 400), never a 500,
and no environment is created."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from kiln.identity.models import Team
from portal.models import Environment, TeamBudget
from tests.portal.test_pages import FORM, login

pytestmark = pytest.mark.django_db

# Every field of the form, the check boxes too, and the resubmission's `from`.
CHECKBOXES = ("tenant_control_plane", "spot_node_pool", "database")
FIELDS = (*FORM, *CHECKBOXES)
BAD = {
    "nul": "a\x00b",
    "nul-alone": "\x00",
    "nul-in-number": "4\x00",
    "long": "x" * 100_000,
    "long-number": "9" * 5_000,
}
ROUTES = ("environment-request", "environment-estimate", "environment-policy-check")


@pytest.fixture
def alice(db):
    team = Team.objects.create(slug="payments", name="Payments")
    # A budget, so the estimate's budget line looks the team up.
    TeamBudget.objects.create(team=team, monthly_amount=Decimal("100.00"), currency="USD")
    return login("alice", "engineer", team)


@pytest.mark.parametrize("label", sorted(BAD))
def test_a_bad_value_in_any_field_answers_with_errors_and_creates_nothing(alice, label):
    value = BAD[label]
    answers = {}
    for field in FIELDS:
        data = {**FORM, field: value}
        answers[f"POST new {field}"] = alice.post(reverse("portal:environment-request"), data)
        for route in ROUTES[1:]:
            answers[f"GET {route} {field}"] = alice.get(reverse(f"portal:{route}"), data)
    answers["GET new from"] = alice.get(reverse("portal:environment-request"), {"from": value})
    codes = {name: r.status_code for name, r in answers.items()}
    # A check box sent any value is ticked, as a browser sends it: the first such request is
    # valid (302); the next ones meet its name (200, the form with the error).
    ticked = {f"POST new {field}" for field in CHECKBOXES}
    wrong = {
        n: c for n, c in codes.items() if c not in ((200, 302) if n in ticked else (200, 400, 404))
    }
    assert wrong == {}
    # The form itself comes back with its errors, naming the field it refuses.
    for field in set(FIELDS) - set(CHECKBOXES):
        response = answers[f"POST new {field}"]
        if response.status_code == 200:
            assert field in response.context["form"].errors, field
    # Only the ticked boxes' requests made an environment (the first; the rest reuse its name).
    assert Environment.objects.count() == 1


def test_the_valid_form_still_creates_its_environment(alice):
    response = alice.post(reverse("portal:environment-request"), FORM)
    assert response.status_code == 302
    assert Environment.objects.filter(name="web", team__slug="payments").count() == 1
