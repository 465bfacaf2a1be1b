"""The identity API: /api/v1/me/, /api/v1/teams/ and team members."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from audit.models import OutboxEvent
from kiln.identity.models import Membership, Team

pytestmark = pytest.mark.django_db

TEAMS = "/api/v1/teams/"


@pytest.fixture
def teams():
    payments = Team.objects.create(slug="payments", name="Payments")
    search = Team.objects.create(slug="search", name="Search")
    return payments, search


def audit_actions() -> list[str]:
    """Audited changes other than users created on first sight of their token."""
    events = OutboxEvent.objects.exclude(action="kiln.user.created")
    return list(events.values_list("action", flat=True))


# --- /api/v1/me/ -------------------------------------------------------------------------


def test_me_anonymous_is_401():
    response = APIClient().get("/api/v1/me/")
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_me_shows_sub_roles_and_teams(api_client_for, teams):
    response = api_client_for("approver", "auditor", sub="carol", team="payments").get(
        "/api/v1/me/"
    )
    assert response.status_code == 200
    assert response.json() == {
        "sub": "carol",
        "roles": ["approver", "auditor"],
        "teams": ["payments"],
        "authenticated_by": "token",
    }


def test_me_with_a_session_takes_roles_from_groups(client, teams):
    user = get_user_model().objects.create_user("sam", password="sam-password-1")
    user.groups.add(Group.objects.create(name="engineer"))
    Membership.objects.create(user=user, team=teams[1])
    client.force_login(user)
    assert client.get("/api/v1/me/").json() == {
        "sub": "sam",
        "roles": ["engineer"],
        "teams": ["search"],
        "authenticated_by": "session",
    }


# --- GET /api/v1/teams/ ------------------------------------------------------------------


def test_team_list_anonymous_is_401():
    assert APIClient().get(TEAMS).status_code == 401


def test_team_list_without_any_role_is_403(api_client_for, teams):
    response = api_client_for(sub="nobody").get(TEAMS)
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"


def test_engineer_sees_only_their_teams(api_client_for, teams):
    response = api_client_for("engineer", sub="alice", team="payments").get(TEAMS)
    assert response.status_code == 200
    body = response.json()
    assert [t["slug"] for t in body] == ["payments"]
    assert body[0]["members"] == ["alice"]
    assert body[0]["name"] == "Payments"


def test_platform_admin_sees_every_team(api_client_for, teams):
    response = api_client_for("platform-admin", sub="root").get(TEAMS)
    assert [t["slug"] for t in response.json()] == ["payments", "search"]


# --- POST /api/v1/teams/ -----------------------------------------------------------------


def test_team_create_anonymous_is_401_and_creates_nothing():
    response = APIClient().post(TEAMS, {"slug": "new-team", "name": "New"}, format="json")
    assert response.status_code == 401
    assert not Team.objects.exists()
    assert audit_actions() == []


@pytest.mark.parametrize("role", ["engineer", "approver", "auditor"])
def test_team_create_by_a_non_admin_is_403_and_creates_nothing(api_client_for, role):
    response = api_client_for(role, sub="eve").post(
        TEAMS, {"slug": "new-team", "name": "New"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["message"] == "Only platform admins manage teams."
    assert not Team.objects.filter(slug="new-team").exists()
    assert "kiln.team.created" not in audit_actions()


def test_team_create_by_platform_admin_stores_and_audits(api_client_for):
    response = api_client_for("platform-admin", sub="root").post(
        TEAMS, {"slug": "data-platform", "name": "Data platform"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["slug"] == "data-platform"
    assert response.json()["members"] == []
    team = Team.objects.get(slug="data-platform")
    assert team.name == "Data platform"
    event = OutboxEvent.objects.get(action="kiln.team.created")
    assert event.actor == "root"
    assert event.target == f"kiln.team:{team.pk}"
    assert event.data == {"slug": "data-platform", "name": "Data platform"}


@pytest.mark.parametrize(
    "slug",
    ["Payments", "-lead", "trail-", "under_score", "a" * 64, "dots.not.allowed", ""],
    ids=["upper", "leading-dash", "trailing-dash", "underscore", "64-chars", "dots", "empty"],
)
def test_team_create_with_a_non_dns_1123_slug_is_400_and_changes_nothing(api_client_for, slug):
    response = api_client_for("platform-admin", sub="root").post(
        TEAMS, {"slug": slug, "name": "Bad"}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert "slug" in body["extra"]["fields"]
    assert not Team.objects.exists()
    assert audit_actions() == []


def test_team_create_without_a_name_is_400(api_client_for):
    response = api_client_for("platform-admin", sub="root").post(
        TEAMS, {"slug": "ok-slug"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["extra"]["fields"]["name"] == ["This field is required."]
    assert not Team.objects.exists()


def test_team_create_twice_is_409_and_audited_once(api_client_for, teams):
    response = api_client_for("platform-admin", sub="root").post(
        TEAMS, {"slug": "payments", "name": "Payments again"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert Team.objects.get(slug="payments").name == "Payments"
    assert audit_actions() == []


def test_team_create_with_malformed_json_is_400_malformed(api_client_for):
    response = api_client_for("platform-admin", sub="root").post(
        TEAMS, data='{"slug": "x",', content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "malformed"
    assert "JSON parse error" in response.json()["message"]
    assert not Team.objects.exists()


# --- POST /api/v1/teams/{slug}/members/ --------------------------------------------------


def members_url(slug: str) -> str:
    return f"/api/v1/teams/{slug}/members/"


def test_member_add_anonymous_is_401(teams):
    assert APIClient().post(members_url("payments"), {"username": "x"}).status_code == 401


def test_member_add_by_engineer_of_the_team_is_403(api_client_for, teams):
    get_user_model().objects.create(username="bob")
    response = api_client_for("engineer", sub="alice", team="payments").post(
        members_url("payments"), {"username": "bob"}, format="json"
    )
    assert response.status_code == 403
    assert not Membership.objects.filter(user__username="bob").exists()


def test_member_add_by_platform_admin_stores_and_audits(api_client_for, teams):
    get_user_model().objects.create(username="bob")
    response = api_client_for("platform-admin", sub="root").post(
        members_url("search"), {"username": "bob"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["members"] == ["bob"]
    assert Membership.objects.filter(user__username="bob", team__slug="search").exists()
    event = OutboxEvent.objects.get(action="kiln.membership.created")
    assert event.actor == "root"
    assert event.data == {"user": "bob", "team": "search", "via": "admin"}


def test_member_add_of_an_unknown_user_is_400_and_changes_nothing(api_client_for, teams):
    response = api_client_for("platform-admin", sub="root").post(
        members_url("search"), {"username": "ghost"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["extra"]["fields"] == {"username": ["unknown user"]}
    assert not Membership.objects.filter(team__slug="search").exists()
    assert "kiln.membership.created" not in audit_actions()


def test_member_add_twice_is_409(api_client_for, teams):
    bob = get_user_model().objects.create(username="bob")
    Membership.objects.create(user=bob, team=teams[1])
    response = api_client_for("platform-admin", sub="root").post(
        members_url("search"), {"username": "bob"}, format="json"
    )
    assert response.status_code == 409
    assert Membership.objects.filter(user=bob).count() == 1
    assert audit_actions() == []


def test_member_add_to_an_unknown_team_is_404(api_client_for):
    get_user_model().objects.create(username="bob")
    response = api_client_for("platform-admin", sub="root").post(
        members_url("nope"), {"username": "bob"}, format="json"
    )
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert not Membership.objects.exists()


def test_member_add_without_username_is_400(api_client_for, teams):
    response = api_client_for("platform-admin", sub="root").post(
        members_url("search"), {}, format="json"
    )
    assert response.status_code == 400
    assert "username" in response.json()["extra"]["fields"]
    assert not Membership.objects.exists()


def test_session_post_without_csrf_token_is_refused(teams):
    client = APIClient(enforce_csrf_checks=True)
    root = get_user_model().objects.create_user("root", password="root-password-1")
    root.groups.add(Group.objects.create(name="platform-admin"))
    client.force_login(root)
    response = client.post(TEAMS, {"slug": "csrf-team", "name": "x"}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["message"]
    assert not Team.objects.filter(slug="csrf-team").exists()
