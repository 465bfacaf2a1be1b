"""`Cache-Control: no-store` on every answer to a signed-in user or a bearer token; public
answers (the sign-in page, static files, the transparency log's tiles) keep their caching."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

pytestmark = pytest.mark.django_db


def signed_in(role: str) -> Client:
    user = get_user_model().objects.create_user(f"user-{role}")
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "path", ["/", "/scheduler/", "/audit/"], ids=["home", "scheduler", "audit"]
)
def test_a_signed_in_users_pages_are_not_stored(path):
    response = signed_in("auditor").get(path)
    assert response.status_code == 200
    assert response["Cache-Control"] == "private, no-store"


@pytest.mark.parametrize(
    ("roles", "path"),
    [
        (("engineer",), "/api/v1/me/"),
        (("auditor",), "/api/v1/audit/events/"),
        (("auditor",), "/api/v1/audit/export"),
        (("engineer",), "/api/v1/scheduler/nodes/?capacity_type=cheap"),
    ],
    ids=["me", "audit-events", "audit-export-download", "a-400"],
)
def test_api_answers_to_a_bearer_token_are_not_stored(api_client_for, roles, path):
    response = api_client_for(*roles, sub="audrey").get(path)
    assert response.status_code in (200, 400)
    assert response["Cache-Control"] == "private, no-store"


def test_a_refused_token_is_not_stored_either():
    response = Client().get("/api/v1/me/", HTTP_AUTHORIZATION="Bearer not-a-token")
    assert response.status_code == 401
    assert response["Cache-Control"] == "private, no-store"


def test_anonymous_public_answers_keep_their_own_caching():
    health = Client().get("/healthz")
    assert health.status_code == 200 and "Cache-Control" not in health
    favicon = Client().get("/favicon.ico")
    assert favicon.status_code == 301 and "Cache-Control" not in favicon
