"""Memberships follow the identity provider: claim memberships match each token, admin grants stay."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from audit.models import OutboxEvent
from kiln.identity import services, tokens
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor

pytestmark = pytest.mark.django_db

ENVIRONMENTS = "/api/v1/environments/"


@pytest.fixture
def teams() -> dict[str, Team]:
    return {
        slug: Team.objects.create(slug=slug, name=slug.title())
        for slug in ("payments", "search", "data")
    }


@pytest.fixture
def make_token(jwt_keys):
    """A token for `sub` naming `team` and, if given, a `teams` list."""

    def _make(*, sub: str, team: str | None, teams: list | None = None) -> str:
        return tokens.issue(
            private_key=jwt_keys["private_key"],
            kid=jwt_keys["kid"],
            issuer="https://kiln.test",
            audience="kiln-test",
            sub=sub,
            roles=["engineer"],
            team=team,
            teams=teams,
        )

    return _make


def client_with(make_token, *, sub: str = "mover", team: str | None = None, **claims) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(sub=sub, team=team, **claims)}")
    return client


def memberships(username: str = "mover") -> dict[str, str]:
    return dict(
        Membership.objects.filter(user__username=username).values_list("team__slug", "source")
    )


def membership_events() -> list[tuple[str, str, str, str]]:
    return [
        (e.action, e.actor, e.data["team"], e.data["via"])
        for e in OutboxEvent.objects.filter(action__startswith="kiln.membership.").order_by("id")
    ]


def submit_environment(client: APIClient, name: str = "checkout") -> dict:
    body = {
        "team": "payments",
        "name": name,
        "env_class": "dev",
        "ttl_hours": 24,
        "workload_class": "standard",
        "cpu": 2,
        "memory_gib": 4,
    }
    response = client.post(ENVIRONMENTS, body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def root() -> Actor:
    return Actor(username="root", roles=frozenset({PLATFORM_ADMIN}))


# --- the moved-teams scenario over the API ----------------------------------------------


def test_someone_who_moved_teams_loses_the_old_teams_environments(make_token, teams):
    payments = client_with(make_token, team="payments")
    env = submit_environment(payments)
    assert payments.get(ENVIRONMENTS).json()["count"] == 1

    search = client_with(make_token, team="search")
    assert search.get("/api/v1/me/").json()["teams"] == ["search"]
    assert search.get(ENVIRONMENTS).json() | {"results": None} == {
        "count": 0,
        "next": None,
        "previous": None,
        "results": None,
    }
    assert search.get(f"{ENVIRONMENTS}{env['id']}/").status_code == 404
    assert memberships() == {"search": Membership.CLAIM}

    nobody = client_with(make_token, team=None)
    assert nobody.get("/api/v1/me/").json()["teams"] == []
    assert nobody.get(ENVIRONMENTS).json()["count"] == 0
    assert memberships() == {}
    assert membership_events() == [
        ("kiln.membership.created", "system:identity", "payments", "jwt"),
        ("kiln.membership.deleted", "system:identity", "payments", "jwt"),
        ("kiln.membership.created", "system:identity", "search", "jwt"),
        ("kiln.membership.deleted", "system:identity", "search", "jwt"),
    ]


def test_the_old_token_still_names_the_old_team_and_gets_it_back(make_token, teams):
    """The identity provider is the source of truth: whichever token speaks last wins."""
    client_with(make_token, team="payments").get("/api/v1/me/")
    client_with(make_token, team="search").get("/api/v1/me/")
    assert client_with(make_token, team="payments").get("/api/v1/me/").json()["teams"] == [
        "payments"
    ]
    assert memberships() == {"payments": Membership.CLAIM}


def test_a_teams_list_claim_grants_each_listed_team_and_drops_the_rest(make_token, teams):
    response = client_with(make_token, team="payments", teams=["search", "data"]).get(
        "/api/v1/me/"
    )
    assert response.json()["teams"] == ["data", "payments", "search"]
    response = client_with(make_token, teams=["data", "no-such-team", 7]).get("/api/v1/me/")
    assert response.json()["teams"] == ["data"]
    assert memberships() == {"data": Membership.CLAIM}


# --- admin grants -------------------------------------------------------------------------


def test_an_admin_grant_survives_tokens_that_do_not_name_it(make_token, teams):
    get_user_model().objects.create(username="mover")
    services.membership_add(actor=root(), team=teams["payments"], username="mover")
    assert client_with(make_token, team="search").get("/api/v1/me/").json()["teams"] == [
        "payments",
        "search",
    ]
    assert client_with(make_token).get("/api/v1/me/").json()["teams"] == ["payments"]
    assert memberships() == {"payments": Membership.ADMIN}
    assert membership_events() == [
        ("kiln.membership.created", "root", "payments", "admin"),
        ("kiln.membership.created", "system:identity", "search", "jwt"),
        ("kiln.membership.deleted", "system:identity", "search", "jwt"),
    ]


def test_an_admin_grant_of_a_claimed_team_keeps_one_row_and_the_admin_source_wins(
    make_token, teams
):
    client_with(make_token, team="payments").get("/api/v1/me/")
    services.membership_add(actor=root(), team=teams["payments"], username="mover")
    assert Membership.objects.filter(user__username="mover").count() == 1
    assert memberships() == {"payments": Membership.ADMIN}
    changed = OutboxEvent.objects.get(action="kiln.membership.changed")
    assert changed.actor == "root"
    assert changed.data == {
        "user": "mover",
        "team": "payments",
        "source": "admin",
        "was": "claim",
        "via": "admin",
    }
    # The claim no longer names it; the grant stays.
    assert client_with(make_token).get("/api/v1/me/").json()["teams"] == ["payments"]


def test_granting_an_admin_membership_twice_is_a_conflict_and_changes_nothing(teams):
    get_user_model().objects.create(username="mover")
    services.membership_add(actor=root(), team=teams["search"], username="mover")
    before = OutboxEvent.objects.count()
    with pytest.raises(services.Conflict):
        services.membership_add(actor=root(), team=teams["search"], username="mover")
    assert memberships() == {"search": Membership.ADMIN}
    assert OutboxEvent.objects.count() == before


def test_an_admin_removal_of_a_claim_membership_lasts_until_the_next_token_names_it(
    make_token, teams
):
    client_with(make_token, team="payments").get("/api/v1/me/")
    services.membership_remove(
        actor=root(), membership=Membership.objects.get(user__username="mover")
    )
    assert memberships() == {}
    assert membership_events()[-1] == ("kiln.membership.deleted", "root", "payments", "admin")
    client_with(make_token, team="payments").get("/api/v1/me/")
    assert memberships() == {"payments": Membership.CLAIM}


def test_the_admin_site_shows_the_source_and_grants_over_a_claim(client, make_token, teams):
    from django.contrib.auth.models import Group

    client_with(make_token, team="payments").get("/api/v1/me/")
    admin_user = get_user_model().objects.create_user("root", is_staff=True, is_superuser=True)
    admin_user.groups.add(Group.objects.create(name=PLATFORM_ADMIN))
    client.force_login(admin_user)
    listing = client.get("/admin/kiln/membership/").content.decode()
    assert "token claim" in listing
    mover = get_user_model().objects.get(username="mover")
    added = client.post(
        "/admin/kiln/membership/add/", {"user": mover.pk, "team": teams["payments"].pk}
    )
    assert added.status_code == 302, added.content.decode()[:2000]
    assert memberships() == {"payments": Membership.ADMIN}
    again = client.post(
        "/admin/kiln/membership/add/", {"user": mover.pk, "team": teams["payments"].pk}
    )
    assert again.status_code == 200
    assert "already a member of payments" in again.content.decode()
    assert Membership.objects.filter(user=mover).count() == 1


# --- cheap on the hot path -----------------------------------------------------------------


def test_an_unchanged_claim_costs_two_reads_and_no_write(make_token, teams):
    client = client_with(make_token, team="payments")
    client.get("/api/v1/me/")
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/api/v1/me/")
    assert response.json()["teams"] == ["payments"]
    sql = [q["sql"] for q in captured.captured_queries]
    # the user by sub, then its memberships with their source; the Actor reuses that read
    assert len(sql) == 2, sql
    assert not [q for q in sql if q.split()[0] in ("INSERT", "UPDATE", "DELETE", "SAVEPOINT")]


def test_reconcile_returns_the_team_set_and_writes_nothing_when_it_matches(teams):
    user = get_user_model().objects.create(username="mover")
    assert services.membership_reconcile(user=user, claimed=frozenset({"search"})) == {"search"}
    with CaptureQueriesContext(connection) as captured:
        teams_now = services.membership_reconcile(user=user, claimed=frozenset({"search"}))
    assert teams_now == {"search"} and len(captured.captured_queries) == 1


def test_claimed_teams_reads_the_team_string_and_the_teams_list():
    assert services.claimed_teams({"team": "a", "teams": ["b", "a", "", None, 3]}) == {"a", "b"}
    assert services.claimed_teams({"teams": "a b"}) == frozenset()  # a list, not a string
    assert services.claimed_teams({"team": ["a"]}) == frozenset()
    assert services.claimed_teams({}) == frozenset()
    many = {"teams": [f"t{i}" for i in range(services.MAX_CLAIMED_TEAMS + 50)]}
    assert len(services.claimed_teams(many)) == services.MAX_CLAIMED_TEAMS
