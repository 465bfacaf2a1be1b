"""Django admin: who may enter is decided by kiln.identity.permissions; writes are audited."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from audit.models import OutboxEvent
from kiln.admin_site import KilnAdminSite
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import Actor, can_use_admin

pytestmark = pytest.mark.django_db


def person(username: str, *, role: str | None, staff: bool, superuser: bool = False):
    user = get_user_model().objects.create_user(
        username, password=None, is_staff=staff, is_superuser=superuser
    )
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.mark.parametrize(
    ("roles", "staff", "allowed"),
    [
        ({"platform-admin"}, True, True),
        ({"approver"}, True, True),
        ({"engineer"}, True, False),
        ({"auditor"}, True, False),
        ({"platform-admin"}, False, False),
        ({"approver"}, False, False),
        (set(), True, False),
    ],
    ids=[
        "admin-staff",
        "approver-staff",
        "engineer-staff",
        "auditor-staff",
        "admin-not-staff",
        "approver-not-staff",
        "no-role-staff",
    ],
)
def test_can_use_admin_needs_staff_and_admin_or_approver(roles, staff, allowed):
    assert can_use_admin(Actor("x", roles=frozenset(roles)), is_staff=staff) is allowed


def test_the_default_admin_site_is_kilns():
    assert isinstance(admin.site, KilnAdminSite)
    assert admin.site.is_registered(Team) and admin.site.is_registered(Membership)


def test_anonymous_is_sent_to_the_admin_login(client):
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize(
    ("role", "staff", "superuser", "allowed"),
    [
        ("platform-admin", True, False, True),
        ("approver", True, False, True),
        (None, True, True, True),  # a superuser is a platform admin
        ("engineer", True, False, False),
        ("platform-admin", False, False, False),
    ],
    ids=["platform-admin", "approver", "superuser", "engineer-staff", "admin-not-staff"],
)
def test_admin_index_follows_the_permission_module(client, role, staff, superuser, allowed):
    client.force_login(person("p", role=role, staff=staff, superuser=superuser))
    response = client.get("/admin/")
    if allowed:
        assert response.status_code == 200
        assert "Kiln administration" in response.content.decode()
    else:
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_approver_sees_their_teams_but_cannot_add_one(client):
    payments = Team.objects.create(slug="payments", name="Payments")
    search = Team.objects.create(slug="search", name="Search")
    carol = person("carol", role="approver", staff=True)
    Membership.objects.create(user=carol, team=payments)
    Membership.objects.create(user=person("bob", role="engineer", staff=False), team=search)
    client.force_login(carol)
    listing = client.get("/admin/kiln/team/")
    assert listing.status_code == 200
    assert "payments" in listing.content.decode()
    # Another team is hidden, as everywhere else: not listed, its page missing, its members
    # not listed, and not offered as a filter.
    assert f"/admin/kiln/team/{payments.pk}/change/" in listing.content.decode()
    assert f"/admin/kiln/team/{search.pk}/change/" not in listing.content.decode()
    assert client.get(f"/admin/kiln/team/{search.pk}/change/").status_code in (302, 404)
    members = client.get("/admin/kiln/membership/").content.decode()
    assert "carol" in members and "bob" not in members
    assert f"team__id__exact={search.pk}" not in members
    assert client.get("/admin/kiln/team/add/").status_code == 403
    response = client.post("/admin/kiln/team/add/", {"slug": "sneaky", "name": "Sneaky"})
    assert response.status_code == 403
    assert not Team.objects.filter(slug="sneaky").exists()


def test_platform_admin_adds_a_team_through_the_audited_service(client):
    client.force_login(person("root", role="platform-admin", staff=True))
    response = client.post(
        "/admin/kiln/team/add/",
        {
            "slug": "ml-infra",
            "name": "ML infra",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    team = Team.objects.get(slug="ml-infra")
    event = OutboxEvent.objects.get(action="kiln.team.created")
    assert (event.actor, event.target) == ("root", f"kiln.team:{team.pk}")


def test_admin_team_with_a_bad_slug_is_a_form_error_and_changes_nothing(client):
    client.force_login(person("root", role="platform-admin", staff=True))
    response = client.post(
        "/admin/kiln/team/add/",
        {
            "slug": "Not_DNS",
            "name": "Bad",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200
    assert "DNS-1123" in response.content.decode()
    assert not Team.objects.exists()
    assert not OutboxEvent.objects.exists()


def test_platform_admin_adds_and_removes_a_member_audited(client):
    team = Team.objects.create(slug="payments", name="Payments")
    bob = person("bob", role="engineer", staff=False)
    client.force_login(person("root", role="platform-admin", staff=True))

    added = client.post("/admin/kiln/membership/add/", {"user": bob.pk, "team": team.pk})
    assert added.status_code == 302
    membership = Membership.objects.get(user=bob, team=team)
    assert OutboxEvent.objects.filter(action="kiln.membership.created", actor="root").exists()

    removed = client.post(f"/admin/kiln/membership/{membership.pk}/delete/", {"post": "yes"})
    assert removed.status_code == 302
    assert not Membership.objects.exists()
    deleted = OutboxEvent.objects.get(action="kiln.membership.deleted")
    assert deleted.data == {"user": "bob", "team": "payments", "via": "admin"}


def test_bulk_delete_of_memberships_is_audited_per_row(client):
    team = Team.objects.create(slug="payments", name="Payments")
    ids = [
        Membership.objects.create(user=person(n, role=None, staff=False), team=team).pk
        for n in ("u1", "u2")
    ]
    client.force_login(person("root", role="platform-admin", staff=True))
    response = client.post(
        "/admin/kiln/membership/",
        {"action": "delete_selected", "_selected_action": ids, "post": "yes"},
    )
    assert response.status_code == 302
    assert not Membership.objects.exists()
    assert OutboxEvent.objects.filter(action="kiln.membership.deleted").count() == 2


def test_approver_cannot_delete_a_membership(client):
    team = Team.objects.create(slug="payments", name="Payments")
    membership = Membership.objects.create(user=person("bob", role=None, staff=False), team=team)
    client.force_login(person("carol", role="approver", staff=True))
    response = client.post(f"/admin/kiln/membership/{membership.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert Membership.objects.filter(pk=membership.pk).exists()


# --- people and groups: roles change here, so every change is audited -------------------


def user_change_form(user, **overrides) -> dict:
    form = {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01",
        "initial-date_joined_1": "00:00:00",
        "groups": [],
        "user_permissions": [],
    }
    form.update(overrides)
    return form


def test_granting_a_role_in_the_admin_is_audited(client):
    alice = person("alice", role="engineer", staff=False)
    approver = Group.objects.get_or_create(name="approver")[0]
    engineer = Group.objects.get(name="engineer")
    client.force_login(person("root", role="platform-admin", staff=True))
    response = client.post(
        f"/admin/auth/user/{alice.pk}/change/",
        user_change_form(alice, groups=[engineer.pk, approver.pk]),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert set(alice.groups.values_list("name", flat=True)) == {"engineer", "approver"}
    event = OutboxEvent.objects.get(action="kiln.user.changed")
    assert event.actor == "root"
    assert event.target == f"auth.user:{alice.pk}"
    assert event.data["groups"] == ["approver", "engineer"]
    assert event.data["fields"] == ["Groups"]


def test_deleting_a_person_in_the_admin_is_audited(client):
    bob = person("bob", role="engineer", staff=False)
    client.force_login(person("root", role="platform-admin", staff=True))
    response = client.post(f"/admin/auth/user/{bob.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not get_user_model().objects.filter(username="bob").exists()
    event = OutboxEvent.objects.get(action="kiln.user.deleted")
    assert event.target == f"auth.user:{bob.pk}"
    assert event.data["username"] == "bob" and event.data["groups"] == ["engineer"]


def test_creating_a_group_in_the_admin_is_audited(client):
    client.force_login(person("root", role="platform-admin", staff=True))
    response = client.post("/admin/auth/group/add/", {"name": "auditor", "permissions": []})
    assert response.status_code == 302
    group = Group.objects.get(name="auditor")
    event = OutboxEvent.objects.get(action="kiln.group.created")
    assert (event.target, event.data) == (
        f"auth.group:{group.pk}",
        {"name": "auditor", "via": "admin"},
    )


@pytest.mark.parametrize("path", ["/admin/auth/user/", "/admin/auth/group/"])
def test_approvers_cannot_see_people_or_groups(client, path):
    client.force_login(person("carol", role="approver", staff=True))
    assert client.get(path).status_code == 403
    index = client.get("/admin/").content.decode()
    assert "/admin/auth/user/" not in index and "/admin/kiln/team/" in index


def test_approver_cannot_grant_themselves_a_role(client):
    carol = person("carol", role="approver", staff=True)
    admin_group = Group.objects.create(name="platform-admin")
    client.force_login(carol)
    response = client.post(
        f"/admin/auth/user/{carol.pk}/change/",
        user_change_form(carol, groups=[admin_group.pk], is_staff="on"),
    )
    assert response.status_code == 403
    assert list(carol.groups.values_list("name", flat=True)) == ["approver"]
    assert not OutboxEvent.objects.exists()
