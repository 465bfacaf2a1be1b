"""The request form's live policy check: a dry run of the request policies on the form's values,
in the words the API's denial uses, storing and auditing nothing."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import OutboxEvent
from kiln.identity.models import Team
from portal.models import Environment, PolicyDecision
from tests.portal.test_pages import FORM, login

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(db) -> Team:
    return Team.objects.create(slug="payments", name="Payments")


URL = "portal:environment-policy-check"
SPOT_LATENCY = {**FORM, "env_class": "dev", "workload_class": "latency-sensitive",
                "spot_node_pool": "on"}  # fmt: skip


def test_spot_with_the_default_class_is_denied_in_the_apis_words_and_nothing_is_stored(team):
    alice = login("alice", "engineer", team)
    events = OutboxEvent.objects.count()
    html = alice.get(reverse(URL), SPOT_LATENCY).content.decode()
    assert "would be denied" in html
    assert "latency-sensitive workloads never run on spot capacity" in html
    assert "kiln-request-spot-classes" in html
    assert not Environment.objects.exists() and not PolicyDecision.objects.exists()
    assert OutboxEvent.objects.count() == events
    # Submitting the same values: DENIED with the same words.
    alice.post(reverse("portal:environment-request"), SPOT_LATENCY)
    env = Environment.objects.get()
    assert env.status == "DENIED"
    assert "latency-sensitive workloads never run on spot capacity" in env.status_reason


def test_an_allowed_draft_says_so_even_before_it_has_a_name(team):
    alice = login("alice", "engineer", team)
    html = alice.get(reverse(URL), {**FORM, "name": "", "env_class": "dev"}).content.decode()
    assert "Every request policy allows this" in html and "denied" not in html


def test_a_typed_name_that_is_refused_is_said_beside_an_allowed_verdict(team):
    alice = login("alice", "engineer", team)
    html = alice.get(reverse(URL), {**FORM, "name": "Bad_Name", "env_class": "dev"}).content
    html = html.decode()
    assert "Every request policy allows this" in html
    assert "The name must still be fixed before it can be sent:" in html
    good = alice.get(reverse(URL), {**FORM, "name": "web", "env_class": "dev"}).content.decode()
    assert "Every request policy allows this" in good and "must still be fixed" not in good


def test_fields_that_do_not_parse_are_named_instead_of_a_verdict(team):
    alice = login("alice", "engineer", team)
    response = alice.get(reverse(URL), {**FORM, "cpu": "many", "team": "search"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "Policies are checked once these are fixed" in html and "CPU cores" in html
    assert "allows" not in html and "denied" not in html  # another team's draft: no verdict


def test_only_engineers_of_a_team_may_dry_run(team):
    assert login("erin", "auditor").get(reverse(URL), FORM).status_code == 403
    assert Client().get(reverse(URL), FORM).status_code == 302
