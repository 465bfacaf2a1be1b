"""Answers to a signed-in user are never stored: the environment's pages, API answers and downloads."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from portal.models import Environment
from tests.portal.test_pages import FORM, login, team  # noqa: F401 - the `team` fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def ready(team, django_capture_on_commit_callbacks) -> tuple[Client, Environment]:  # noqa: F811
    alice = login("alice", "engineer", team)
    with django_capture_on_commit_callbacks(execute=True):
        alice.post(reverse("portal:environment-request"), {**FORM, "env_class": "dev"})
    env = Environment.objects.get()
    assert env.status == "READY", env.status_reason
    return alice, env


@pytest.mark.parametrize(
    "route",
    [
        "portal:environment-detail",
        "portal:environment-progress",
        "portal:environment-manifests",
        "portal:environment-kubeconfig",
    ],
    ids=["detail-page", "progress-partial", "manifest-bundle", "kubeconfig"],
)
def test_a_signed_in_users_environment_answers_are_not_stored(ready, route):
    alice, env = ready
    response = alice.get(reverse(route, args=[env.public_id]))
    assert response.status_code == 200
    assert response["Cache-Control"] == "private, no-store"


def test_the_environment_list_and_the_api_answer_are_not_stored(ready, api_client_for):
    alice, env = ready
    assert alice.get(reverse("portal:environment-list"))["Cache-Control"] == "private, no-store"
    api = api_client_for("engineer", sub="alice", team="payments")
    detail = api.get(f"/api/v1/environments/{env.public_id}/")
    assert detail.status_code == 200
    # The answer carries an ETag for conditional reads; it is still never stored.
    assert detail["Cache-Control"] == "private, no-store" and detail["ETag"]
