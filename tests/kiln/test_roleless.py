"""A valid token (or session) without a Kiln role reaches nothing but `GET /api/v1/me/`.

Routes come from the URL resolver, so a route added later is covered without editing
this file.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import URLPattern, URLResolver, get_resolver

from audit.models import OutboxEvent
from kiln.identity.models import Membership, Team

pytestmark = pytest.mark.django_db

# Public by design (anonymous callers get them too): the index of routes.
PUBLIC_API_ROUTES = {"/api/v1/"}
# A fixed id of nothing, so every parallel worker collects the same test ids (pytest-xdist).
SAMPLE_ARGS = {
    "uuid": "3f0b8a52-6a1c-4c3e-9d7e-2b1f5c8e9a41",
    "int": "1",
    "slug": "payments",
    "str": "x",
}


def _walk(resolver: URLResolver, prefix: str = "", namespace: str = ""):
    for p in resolver.url_patterns:
        if isinstance(p, URLResolver):
            ns = p.namespace or namespace
            yield from _walk(p, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p, namespace


def _concrete(route: str) -> str:
    """`environments/<str:public_id>/` -> `/environments/x/` (each converter a sample value)."""
    import re

    return "/" + re.sub(
        r"<(?:(\w+):)?\w+>", lambda m: SAMPLE_ARGS.get(m.group(1) or "str", "x"), route
    )


def _api_operations() -> list[tuple[str, str]]:
    ops = []
    for route, pattern, _ns in _walk(get_resolver()):
        if not route.startswith("api/v1/"):
            continue
        view_class = getattr(pattern.callback, "view_class", None)
        assert view_class is not None, f"{route} is not a class-based API view"
        for method in ("get", "post", "put", "patch", "delete"):
            if hasattr(view_class, method):
                ops.append((method, _concrete(route)))
    return ops


API_OPERATIONS = _api_operations()
# What a role-less caller may still do: read who it is, and the public index.
OPEN_TO_ROLELESS = {("get", "/api/v1/me/")} | {("get", p) for p in PUBLIC_API_ROUTES}
REFUSED_OPERATIONS = [op for op in API_OPERATIONS if op not in OPEN_TO_ROLELESS]
APP_PAGES = sorted(
    {
        _concrete(route)
        for route, _pattern, ns in _walk(get_resolver())
        if ns in {"portal", "scheduler", "canary", "chaos", "audit"}
        and not route.startswith("scheduler/filter")
        and not route.startswith("scheduler/prioritize")
        and not route.startswith("hooks/")
    }
)


def test_the_route_walk_finds_every_app():
    paths = {path for _m, path in API_OPERATIONS}
    for expected in (
        "/api/v1/me/",
        "/api/v1/environments/",
        "/api/v1/rollouts/",
        "/api/v1/chaos/experiments/",
        "/api/v1/audit/events/",
        "/api/v1/teams/",
    ):
        assert expected in paths
    assert "/environments/" in APP_PAGES and "/audit/" in APP_PAGES and "/chaos/" in APP_PAGES
    assert len(REFUSED_OPERATIONS) == len(API_OPERATIONS) - 2  # /me/ and the index only


@pytest.fixture
def roleless(api_client_for):
    """A role-less token whose subject belongs to a real team (membership alone grants nothing)."""
    Team.objects.get_or_create(slug="payments", defaults={"name": "Payments"})
    client = api_client_for(sub="nobody", team="payments")
    # The first authentication provisions the user and its claimed membership (audited);
    # everything after it must change nothing.
    assert client.get("/api/v1/me/").json()["teams"] == ["payments"]
    return client


@pytest.mark.parametrize(
    ("method", "path"), REFUSED_OPERATIONS, ids=[f"{m} {p}" for m, p in REFUSED_OPERATIONS]
)
def test_roleless_token_is_refused_on_every_api_operation(roleless, method, path):
    before = OutboxEvent.objects.count()
    response = getattr(roleless, method)(path, data={}, format="json")
    assert response.status_code == 403, (method, path, response.content[:300])
    body = response.json()
    assert body["code"] == "forbidden" and set(body) == {"code", "message", "extra"}
    assert OutboxEvent.objects.count() == before


def test_roleless_token_still_sees_who_it_is(roleless):
    response = roleless.get("/api/v1/me/")
    assert response.status_code == 200
    assert response.json()["roles"] == [] and response.json()["sub"] == "nobody"


def test_roleless_token_gets_403_not_an_empty_list(roleless):
    response = roleless.get("/api/v1/environments/")
    assert response.status_code == 403
    assert "no Kiln role" in response.json()["message"]


def test_a_role_opens_what_roleless_was_refused(api_client_for):
    assert api_client_for("engineer", sub="alice").get("/api/v1/environments/").status_code == 200


@pytest.fixture
def roleless_session(client):
    user = get_user_model().objects.create_user("dan", password=None)
    user.groups.add(Group.objects.create(name="not-a-kiln-role"))
    team = Team.objects.create(slug="payments", name="Payments")
    Membership.objects.create(user=user, team=team)
    client.force_login(user)
    return client


@pytest.mark.parametrize("path", APP_PAGES)
def test_roleless_person_is_refused_on_every_app_page(roleless_session, path):
    response = roleless_session.get(path)
    assert response.status_code == 403, (path, response.status_code)


def test_roleless_person_sees_the_home_page_and_me(roleless_session):
    assert roleless_session.get("/").status_code == 200
    me = roleless_session.get("/api/v1/me/")
    assert me.status_code == 200 and me.json()["roles"] == []
    assert roleless_session.get("/api/v1/environments/").status_code == 403


def test_engineer_session_still_reaches_the_pages(client):
    user = get_user_model().objects.create_user("erin", password=None)
    user.groups.add(Group.objects.create(name="engineer"))
    client.force_login(user)
    assert client.get("/environments/").status_code == 200
    assert client.get("/chaos/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_roleless_token_of_the_owning_team_gets_no_rollout_stream(make_token):
    """A team member without a role may not watch the team's rollout over the websocket."""
    from asgiref.sync import async_to_sync

    from canary.models import Rollout, Service
    from tests.canary.test_stream import Socket

    team = Team.objects.create(slug="payments", name="Payments")
    service = Service.objects.create(team=team, name="web", namespace="shop", host="web")
    rollout = Rollout.objects.create(
        service=service, baseline_version="v1", canary_version="v2", steps=[50, 100]
    )

    async def connect(token: str) -> tuple[bool, int | None]:
        ws = Socket(f"/ws/rollouts/{rollout.pk}/?token={token}")
        result = await ws.connect()
        await ws.disconnect()
        return result

    roleless = make_token(sub="nobody", roles=[], team="payments")
    assert async_to_sync(connect)(roleless) == (False, 4403)
    engineer = make_token(sub="erin", roles=["engineer"], team="payments")
    assert async_to_sync(connect)(engineer)[0] is True
