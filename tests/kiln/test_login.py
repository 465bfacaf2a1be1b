"""Session login and logout for people; roles come from Django groups."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from kiln.identity.models import Membership, Team

pytestmark = pytest.mark.django_db

PASSWORD = "carol-kiln-demo"


@pytest.fixture
def carol():
    user = get_user_model().objects.create_user("carol", password=PASSWORD)
    user.groups.add(Group.objects.create(name="approver"), Group.objects.create(name="auditor"))
    Membership.objects.create(user=user, team=Team.objects.create(slug="payments", name="Payments"))
    return user


def test_home_sends_anonymous_people_to_the_login_page(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_login_page_renders_the_form(client):
    response = client.get("/accounts/login/")
    html = response.content.decode()
    assert response.status_code == 200
    assert '<form method="post" action="/accounts/login/"' in html
    assert 'name="csrfmiddlewaretoken"' in html
    assert 'name="username"' in html and 'name="password"' in html


def test_session_login_then_home_shows_roles_from_groups_and_teams(client, carol):
    response = client.post(
        "/accounts/login/", {"username": "carol", "password": PASSWORD, "next": "/"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.session["_auth_user_id"] == str(carol.pk)
    html = client.get("/").content.decode()
    assert "Welcome, carol" in html
    assert '<span class="badge role">approver</span>' in html
    assert '<span class="badge role">auditor</span>' in html
    assert "payments" in html


def test_roles_follow_group_changes(client, carol):
    client.force_login(carol)
    carol.groups.remove(Group.objects.get(name="auditor"))
    assert client.get("/api/v1/me/").json()["roles"] == ["approver"]


def test_groups_that_are_not_roles_grant_nothing(client):
    user = get_user_model().objects.create_user("dan", password=None)
    user.groups.add(Group.objects.create(name="admins-of-everything"))
    client.force_login(user)
    assert client.get("/api/v1/me/").json()["roles"] == []


def test_wrong_password_shows_an_error_and_does_not_log_in(client, carol):
    response = client.post("/accounts/login/", {"username": "carol", "password": "nope"})
    assert response.status_code == 200
    assert "That username and password do not match." in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302


def test_login_page_redirects_people_already_signed_in(client, carol):
    client.force_login(carol)
    response = client.get("/accounts/login/")
    assert response.status_code == 302 and response["Location"] == "/"


def test_logout_is_a_post_and_ends_the_session(client, carol):
    client.force_login(carol)
    assert client.get("/accounts/logout/").status_code == 405  # a link cannot sign you out
    assert client.get("/").status_code == 200
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302


def test_login_does_not_redirect_off_site(client, carol):
    response = client.post(
        "/accounts/login/",
        {"username": "carol", "password": PASSWORD, "next": "https://evil.example/"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_navigation_marks_only_the_most_specific_entry_active(rf, carol, monkeypatch):
    from django.urls import NoReverseMatch

    from kiln import context_processors

    routes = {
        "portal:environment-list": "/environments/",
        "portal:approval-queue": "/environments/approvals/",
    }

    def reverse(name: str) -> str:  # only these two pages exist
        if name not in routes:
            raise NoReverseMatch(name)
        return routes[name]

    monkeypatch.setattr(context_processors, "reverse", reverse)
    request = rf.get("/environments/approvals/42/")
    request.user = carol
    items = context_processors.navigation(request)["nav_items"]
    assert [(i["label"], i["active"]) for i in items] == [
        ("Environments", False),
        ("Approvals", True),
    ]
    request = rf.get("/environments/7/")
    request.user = carol
    items = context_processors.navigation(request)["nav_items"]
    assert [i["active"] for i in items] == [True, False]
