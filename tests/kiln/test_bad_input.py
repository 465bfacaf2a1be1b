# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""Nasty input over HTTP: every API operation and app page answers 4xx `{code, message, extra}`
(or, where the input is acceptable, a success), never a 500, and a refused request changes
nothing.

Routes come from the URL resolver, so a route added later is fuzzed without editing this file;
each operation is sent a table of bad query values, bad bodies and each body field replaced
in turn by a bad value.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from audit.models import OutboxEvent
from canary.chaos.models import ChaosExperiment
from canary.models import MetricsSource, Rollout, Service
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import ENGINEER, PLATFORM_ADMIN, Actor
from portal import services as portal_services
from tests.chaos.test_chaos_support import abort_data, backend, chaos_settings, shop  # noqa: F401

pytestmark = pytest.mark.django_db

BAD_VALUES: dict[str, Any] = {
    "nul": "a\x00b",
    "huge-int": 2**64,
    "int32-overflow": 2**31,
    "negative": -1,
    "long-string": "x" * 100_000,
    "unicode": "ünïcødé-名前",
    "object": {"a": {"b": "\x00"}},
    "list": [1, "\x00"],
    "bool": True,
    "null": None,
    "fraction": 1.5,
}
# Raw JSON a Python value cannot stand for: substituted for a field's value in the body text.
RAW_VALUES = {
    "overflow-float": "-1e400",
    "nan": "NaN",
    "huge-int": "1" + "0" * 400,  # decoded exactly; float() of it overflows
    "lone-surrogate": '"\\ud800"',  # legal JSON; no UTF-8 can write it back
}
BAD_BODIES: dict[str, tuple[str | bytes, str]] = {
    "array": ("[]", "application/json"),
    "string": ('"x"', "application/json"),
    "number": ("1", "application/json"),
    "json-null": ("null", "application/json"),
    "malformed": ("{", "application/json"),
    "deep": ("[" * 100_000 + "]" * 100_000, "application/json"),
    "nul-key": ('{"a\\u0000": 1}', "application/json"),
    "surrogate-key": ('{"\\udfff": 1}', "application/json"),
    "form": ("reason=x&name=y", "application/x-www-form-urlencoded"),  # 415: JSON only
    "multipart": (
        '--x\r\nContent-Disposition: form-data; name="reason"\r\n\r\ny\r\n--x--\r\n',
        "multipart/form-data; boundary=x",
    ),
    "bad-utf8": (b'{"reason": "\xff"}', "application/json"),
    "text": ("hello", "text/plain"),
    "xml": ("<a>1</a>", "application/xml"),
    "form-nul": ("reason=a%00b&name=x%00", "application/x-www-form-urlencoded"),
    "multipart-no-boundary": ("--x\r\nbad", "multipart/form-data"),
}
# Odd but acceptable: Django ignores an unknown charset and reads UTF-8.
ODD_BODIES = {"bogus-charset": ('{"reason": "x"}', "application/json; charset=no-such-codec")}
BAD_QUERY_VALUES = {
    "huge-int": "99999999999999999999",
    "negative": "-1",
    "zero": "0",
    "word": "abc",
    "impossible-date": "2026-02-30",
    "overflow-date": "9999-12-31T23:59:59-14:00",
    "underflow-date": "0001-01-01T00:00:00+14:00",
    "long": "y" * 1000,  # under the request guard's limit, so each view meets it
    "unicode": "ünï",
    "percent": "%",
}
QUERY_NAMES = (
    "limit", "offset", "cursor", "from", "to", "since", "until", "status", "team", "env_class",
    "requested_by", "q", "actor", "action", "target", "format", "reason", "page", "mine", "was",
    "cpu", "ttl_hours", "memory_gib", "gpu",
)  # fmt: skip
# Bad values whose exact answer the issue names: a 400 naming the parameter.
MUST_BE_400 = [
    ("/api/v1/audit/events/", "from", "2026-02-30"),
    ("/api/v1/audit/events/", "from", "9999-12-31T23:59:59-14:00"),
    ("/api/v1/audit/events/", "to", "2026-13-01"),
    ("/api/v1/audit/events/", "limit", "99999999999999999999"),
    ("/api/v1/audit/events/", "limit", "0"),
    ("/api/v1/audit/export", "from", "2026-02-30"),
    ("/api/v1/audit/export", "until", "9999-12-31T23:59:59-14:00"),
    ("/api/v1/environments/", "limit", "99999999999999999999"),
    ("/api/v1/environments/", "limit", "501"),
    ("/api/v1/environments/", "offset", "99999999999999999999"),
    ("/api/v1/environments/", "offset", "-1"),
    ("/api/v1/environments/", "limit", "abc"),
    ("/api/v1/chaos/experiments/", "limit", "99999999999999999999"),
    ("/api/v1/chaos/experiments/", "offset", "1e3"),
    ("/api/v1/environments/", "team", "a\x00b"),
]


def _walk(resolver: URLResolver, prefix: str = ""):
    for p in resolver.url_patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p


API_ROUTES = [(r, p) for r, p in _walk(get_resolver()) if r.startswith("api/v1/")]
PAGE_ROUTES = [
    r
    for r, p in _walk(get_resolver())
    if getattr(p.callback, "__module__", "").split(".")[0]
    in {"portal", "canary", "audit", "scheduler"}
    and not r.startswith("api/")
    and r not in {"scheduler/filter", "scheduler/prioritize"}
]


@pytest.fixture
def world(shop, backend, settings):
    """One object of each kind, and the values that fill each route's path parameters."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    payments = Team.objects.get(slug="payments")
    User = get_user_model()
    alice = User.objects.create_user("alice", password=None)
    Membership.objects.create(user=alice, team=payments)
    env, _ = portal_services.environment_request_submit(
        actor=Actor("alice", roles=frozenset({ENGINEER}), teams=frozenset({"payments"}), user_id=alice.pk),
        data={
            "team": "payments", "name": "fuzz", "env_class": "dev", "ttl_hours": 4,
            "workload_class": "standard", "cpu": 1, "memory_gib": 1, "gpu": 0,
            "tenant_control_plane": False, "spot_node_pool": False, "database": False,
            "justification": "",
        },
    )  # fmt: skip
    service = Service.objects.create(
        team=payments, name="ledger", namespace="shop", host="ledger.shop.svc.cluster.local",
        metrics_source=MetricsSource.PUSH,
    )  # fmt: skip
    rollout = Rollout.objects.create(
        service=service,
        baseline_version="v1",
        canary_version="v2",
        steps=[50, 100],
        status="running",
    )
    from canary.chaos.services import experiment_create

    exp = experiment_create(
        actor=Actor("root", roles=frozenset({PLATFORM_ADMIN})), data=abort_data(), start=False
    )
    return {
        "public_id": env.public_id,
        "rollout_id": str(rollout.pk),
        "experiment_id": str(exp.pk),
        "injection_id": "1",  # none: a recheck's body is checked before the injection is looked up
        "slug": "payments",
        "team": "payments",
        "seq": "1",
        "service": str(service.pk),
    }


def _fill(route: str, world: dict[str, str]) -> str:
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: world.get(m.group(1), "x"), route)


def _bodies(world: dict[str, str]) -> dict[str, dict[str, Any]]:
    """A valid body per POST route, so each field can be replaced by a bad value in turn."""
    return {
        "/api/v1/teams/": {"slug": "newteam", "name": "New team"},
        "/api/v1/teams/payments/members/": {"username": "alice"},
        "/api/v1/environments/": {
            "team": "payments",
            "name": "other",
            "env_class": "dev",
            "ttl_hours": 4,
            "workload_class": "standard",
            "cpu": 1,
            "memory_gib": 1,
            "gpu": 0,
            "tenant_control_plane": False,
            "spot_node_pool": False,
            "database": False,
            "justification": "because",
        },  # fmt: skip
        "approve/": {"reason": "fine"},
        "reject/": {"reason": "no"},
        "extend/": {"hours": 2},
        "/api/v1/canary/services/": {
            "team": "payments",
            "name": "cart",
            "namespace": "shop",
            "host": "cart",
            "metrics_source": "push",
            "queries": {},
            "sim_traffic_class": "steady",
        },  # fmt: skip
        "/api/v1/rollouts/": {
            "service": world["service"],
            "baseline_version": "v1",
            "canary_version": "v2",
            "steps": [50, 100],
            "ticks_per_step": 2,
            "tick_seconds": 1.0,
            "config": {},
        },  # fmt: skip
        "abort/": {"reason": "enough"},
        "promote/": {"reason": "good"},
        "observations/": {"arm": "canary", "requests": 10, "errors": 1, "latencies_ms": [1.0]},
        "/api/v1/chaos/experiments/": {**abort_data(), "start": False},
        "engage/": {"reason": "incident"},
        "release/": {"reason": "over"},
    }


def _body_for(path: str, bodies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if path in bodies:
        return bodies[path]
    return next((b for suffix, b in bodies.items() if path.endswith("/" + suffix)), {})


STATE_TABLES = sorted(
    {OutboxEvent._meta.db_table}
    | {
        m._meta.db_table
        for m in apps.get_models()
        if m._meta.app_label in {"portal", "canary", "chaos", "scheduler"} and m._meta.managed
    }
)


def _state() -> tuple[int, ...]:
    """Row counts of every Kiln table and the audit outbox, in one round trip: a refused
    request changes none of them."""
    # Table names come from the model registry, quoted: nothing here is input.
    counts = [f"(SELECT COUNT(*) FROM {connection.ops.quote_name(t)})" for t in STATE_TABLES]  # noqa: S608
    sql = "SELECT " + ", ".join(counts)
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return tuple(cursor.fetchone())


def _check(response, what: str, before: tuple[int, ...] | None, problems: list[str]) -> None:
    status = response.status_code
    if status >= 500:
        problems.append(f"{what}: {status} {response.content[:200]!r}")
        return
    if status >= 400 and response["Content-Type"].startswith("application/json"):
        body = response.json()
        if set(body) != {"code", "message", "extra"} or not body["message"]:
            problems.append(f"{what}: {status} not the error shape: {body!r:.200}")
    if status >= 400 and before is not None and _state() != before:
        problems.append(f"{what}: {status} but something changed")


@pytest.fixture
def admin_client(api_client_for):
    client = api_client_for("platform-admin", sub="root")
    assert client.get("/api/v1/me/").status_code == 200  # provisions the user (audited) first
    return client


def _named(response) -> set[str]:
    """The parameters a JSON 400 names (extra.parameter, extra.fields)."""
    if not response["Content-Type"].startswith("application/json"):
        return set()
    extra = response.json().get("extra") or {}
    return {extra["parameter"]} if extra.get("parameter") else set(extra.get("fields") or {})


def _fuzz_query(client, method: str, path: str, problems: list[str]) -> int:
    """Send every query name at once with each bad value; when a 400 names the parameters it
    refused, drop them and send the rest again, so no refusal hides another parameter's 500.
    A 400 that names nothing (an HTML page) falls back to one name per request."""
    sent = 0
    for label, value in BAD_QUERY_VALUES.items():
        names = list(QUERY_NAMES)
        while names:
            before = OutboxEvent.objects.count()
            response = getattr(client, method)(path, {n: value for n in names})
            sent += 1
            _check(response, f"{method} {path}?{','.join(names)}={label}", None, problems)
            if OutboxEvent.objects.count() != before and response.status_code >= 400:
                problems.append(f"{method} {path} {label}: refused but audited something")
            if response.status_code != 400:
                break
            named = _named(response) & set(names)
            if not named:
                for name in names:
                    single = getattr(client, method)(path, {name: value})
                    sent += 1
                    _check(single, f"{method} {path}?{name}={label}", None, problems)
                break
            names = [n for n in names if n not in named]
    return sent


@pytest.mark.parametrize("route", [r for r, _ in API_ROUTES], ids=[r for r, _ in API_ROUTES])
def test_no_bad_query_value_answers_500_on_any_api_route(route, world, admin_client):
    path = _fill(route, world)
    view = dict(API_ROUTES)[route].callback.view_class
    problems: list[str] = []
    for method in ("get", "delete"):
        if hasattr(view, method):
            _fuzz_query(admin_client, method, path, problems)
    assert problems == []


@pytest.mark.parametrize(
    ("path", "name", "value"), MUST_BE_400, ids=[f"{p}?{n}={v}" for p, n, v in MUST_BE_400]
)
def test_bad_dates_and_pages_are_a_400_naming_the_parameter(path, name, value, admin_client, world):
    response = admin_client.get(path, {name: value})
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert set(body) == {"code", "message", "extra"}
    assert f"`{name}`" in body["message"] or name in json.dumps(body["extra"])
    assert body["extra"]["fields"]


POST_ROUTES = [r for r, p in API_ROUTES if hasattr(p.callback.view_class, "post")]


@pytest.mark.parametrize("route", POST_ROUTES, ids=POST_ROUTES)
def test_no_bad_body_answers_500_on_any_api_route(route, world, admin_client):
    path = _fill(route, world)
    base = _body_for(path, _bodies(world))
    problems: list[str] = []
    for label, (text, content_type) in BAD_BODIES.items():
        before = _state()
        response = admin_client.generic("POST", path, text, content_type=content_type)
        _check(response, f"POST {path} body={label}", before, problems)
        assert response.status_code >= 400, (label, response.content[:200])
    for label, (text, content_type) in ODD_BODIES.items():
        before = _state()
        response = admin_client.generic("POST", path, text, content_type=content_type)
        _check(response, f"POST {path} body={label}", before, problems)
    for field in base:
        for label, value in BAD_VALUES.items():
            before = _state()
            response = admin_client.post(path, {**base, field: value}, format="json")
            _check(response, f"POST {path} {field}={label}", before, problems)
        for label, raw in RAW_VALUES.items():
            text = json.dumps({**base, field: "__RAW__"}).replace('"__RAW__"', raw)
            before = _state()
            response = admin_client.generic("POST", path, text, content_type="application/json")
            _check(response, f"POST {path} {field}={label}", before, problems)
            assert response.status_code == 400, (field, label, response.content[:200])
    assert problems == []


def test_huge_integers_are_a_400_naming_the_field(world, admin_client):
    """max_pods and requests past their integer columns (PositiveIntegerField)."""
    chaos = admin_client.post(
        "/api/v1/chaos/experiments/",
        {**abort_data(), "max_pods": 2**31, "start": False},
        format="json",
    )
    assert chaos.status_code == 400 and "max_pods" in chaos.json()["extra"]["fields"]
    pushed = admin_client.post(
        f"/api/v1/rollouts/{world['rollout_id']}/observations/",
        {"arm": "canary", "requests": 2**31, "errors": 0},
        format="json",
    )
    assert pushed.status_code == 400 and "requests" in pushed.json()["extra"]["fields"]
    assert ChaosExperiment.objects.count() == 1  # the fixture's own


ROLLOUT_BODY = {"baseline_version": "v1", "canary_version": "v2", "steps": [50, 100],
                "ticks_per_step": 2, "tick_seconds": 1.0}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"tick_seconds": True}, "tick_seconds"),
        ({"tick_seconds": 10**400}, "tick_seconds"),
        ({"config": {"error_ratio": 1e308}}, "config.error_ratio"),
        ({"config": {"dispersion_prior": 10**400}}, "config.dispersion_prior"),
        ({"config": {"dispersion_ticks": 1e300}}, "config.dispersion_ticks"),
        ({"config": {"max_ticks": 2**63}}, "config.max_ticks"),
    ],
    ids=["bool-tick", "huge-tick", "ratio-1e308", "huge-prior", "huge-ticks", "max-ticks"],
)
def test_rollout_settings_past_what_the_analysis_can_hold_are_a_400(
    change, field, world, admin_client
):
    # Each was once accepted (201) and failed every tick after, or answered 500.
    before = Rollout.objects.count()
    response = admin_client.post(
        "/api/v1/rollouts/", {**ROLLOUT_BODY, "service": world["service"], **change}, format="json"
    )
    assert response.status_code == 400, response.content[:300]
    assert field in response.json()["extra"]["fields"]
    assert Rollout.objects.count() == before


def test_a_pushed_window_dated_ahead_of_the_clock_is_refused(world, admin_client):
    path = f"/api/v1/rollouts/{world['rollout_id']}/observations/"
    window = {"arm": "canary", "requests": 10, "errors": 0}
    ahead = admin_client.post(
        path, {**window, "observed_at": "9999-12-31T23:59:59Z"}, format="json"
    )
    assert ahead.status_code == 400
    assert ahead.json()["extra"]["fields"]["observed_at"] == [
        "at most five minutes ahead of the server's clock"
    ]
    # A clock a minute fast is taken, and the arm goes on taking windows after it.
    soon = (timezone.now() + timedelta(minutes=1)).isoformat()
    assert (
        admin_client.post(path, {**window, "observed_at": soon}, format="json").status_code == 202
    )
    assert admin_client.post(path, window, format="json").status_code == 400  # before `soon`


def test_a_form_encoded_body_is_a_415_as_the_api_documents(world, admin_client):
    response = admin_client.post(
        f"/api/v1/environments/{world['public_id']}/keep/", {"reason": "x"}
    )  # the test client's default: multipart
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


@pytest.fixture
def admin_session(client):
    user = get_user_model().objects.create_user("root2", password=None, is_staff=True)
    for role in ("platform-admin", "auditor", "approver", "engineer"):
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    client.force_login(user)
    return client


@pytest.mark.parametrize("route", PAGE_ROUTES, ids=PAGE_ROUTES)
def test_no_bad_query_value_answers_500_on_any_page(route, world, admin_session):
    problems: list[str] = []
    _fuzz_query(admin_session, "get", _fill(route, world), problems)
    assert problems == []


# Ids of nothing, fixed so every parallel worker collects the same test ids (pytest-xdist).
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/environments/a%00b/",
        "/api/v1/rollouts/" + "x" * 5000 + "/",
        "/api/v1/chaos/experiments/8d2e4c1a-0b7f-4f3a-9c5e-6a1d2b3c4e5f/",
        "/audit/events/99999999999999999999/",
        "/environments/" + "z" * 300 + "/",
        "/environments/%C3%BC%00/",
        "/chaos/c41e9b07-5d2a-4e8f-a3b6-7f9e0d1c2b3a/",
        "/rollouts/a9f3d6e2-1c4b-4d7a-8e5f-0b2c3d4e5f6a/",
    ],
)
def test_bad_paths_are_4xx(path, world, admin_session):
    response = admin_session.get(path)
    assert 400 <= response.status_code < 500, (path, response.status_code)


def test_the_audit_page_shows_a_bad_date_as_a_400_with_the_reason(admin_session):
    response = admin_session.get("/audit/", {"from": "2026-02-30"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "From is not a calendar date (day is out of range for month). Nothing is listed" in page


FORM_FIELDS = (
    "team", "name", "env_class", "ttl_hours", "workload_class", "cpu", "memory_gib", "gpu", "gpus",
    "justification", "hours", "reason", "decision", "next", "namespace", "selector", "service",
    "fault", "delay_ms", "abort_http_status", "percent", "duration_seconds", "max_duration_seconds",
    "max_pods", "max_percent", "stop_error_rate", "stop_p99_ms", "username", "password",
)  # fmt: skip
BAD_FORM_VALUES = {
    "nul": "a\x00b",
    "huge-int": "99999999999999999999",
    "int32-overflow": "2147483648",
    "nan": "NaN",
    "infinity": "inf",
    "overflow-float": "1e400",
    "negative": "-1",
    "long": "x" * 100_000,
    "unicode": "ünï-名前",
}
# A valid form per page that takes one, so each field in turn reaches the service when bad.
VALID_FORMS: dict[str, dict[str, str]] = {
    "environments/new/": {
        "team": "payments", "name": "web", "env_class": "dev", "ttl_hours": "4",
        "workload_class": "standard", "cpu": "1", "memory_gib": "1", "gpu": "0",
        "justification": "x",
    },
    "environments/<str:public_id>/extend/": {"hours": "2"},
    "environments/<str:public_id>/teardown/": {"reason": "done"},
    "environments/<str:public_id>/decide/": {"decision": "reject", "reason": "no", "next": "/"},
    "chaos/new/": {
        "name": "abort web", "namespace": "shop", "selector": "app=web", "service": "web",
        "fault": "http-abort", "abort_http_status": "503", "percent": "50",
        "duration_seconds": "60", "max_duration_seconds": "120", "max_pods": "2",
        "max_percent": "25", "stop_error_rate": "0.5", "stop_p99_ms": "100",
    },
    "chaos/<uuid:experiment_id>/abort/": {"reason": "enough"},
    "scheduler/explain": {"cpu": "0.5", "memory_gib": "1", "gpus": "0", "workload_class": "batch"},
    "accounts/login/": {"username": "root2", "password": "wrong-password-1"},
}  # fmt: skip
POST_PAGES = PAGE_ROUTES + ["accounts/login/"]


@pytest.mark.parametrize("route", POST_PAGES, ids=POST_PAGES)
def test_no_bad_form_answers_500_on_any_page(route, world, admin_session):
    """Every page POSTed every form field set to each bad value at once; pages with a form also
    get each of its fields bad in turn, the rest valid, so the service sees the bad value."""
    path = _fill(route, world)
    problems: list[str] = []
    for label, value in BAD_FORM_VALUES.items():
        before = _state()
        response = admin_session.post(path, dict.fromkeys(FORM_FIELDS, value))
        _check(response, f"POST {path} all={label}", before, problems)
        valid = VALID_FORMS.get(route, {})
        for field in valid:
            before = _state()
            response = admin_session.post(path, {**valid, field: value})
            _check(response, f"POST {path} {field}={label}", before, problems)
    assert problems == []


ADMIN_CHANGELISTS = [
    "/admin/portal/environment/", "/admin/kiln/team/", "/admin/kiln/membership/",
    "/admin/audit/chainevent/", "/admin/scheduler/node/", "/admin/auth/user/", "/admin/auth/group/",
]  # fmt: skip


@pytest.mark.parametrize("path", ADMIN_CHANGELISTS)
def test_admin_changelists_refuse_bad_selected_ids_and_queries(path, world, admin_session):
    """A changelist action posts `_selected_action` ids; ones no primary key can hold are a 400
    (Django filtered with them and raised), and bad search or filter values are never a 500."""
    problems: list[str] = []
    for action in ("approve_selected", "reject_selected", "delete_selected"):
        for bad in ("abc", "99999999999999999999", "\x00", "1.5"):
            before = _state()
            response = admin_session.post(
                path, {"action": action, "_selected_action": [bad], "index": "0", "post": "yes"}
            )
            _check(response, f"POST {path} {action} {bad!r}", before, problems)
            if response.status_code != 400:
                problems.append(f"POST {path} {action} {bad!r}: {response.status_code}")
    for query in (
        {"q": "x" * 5000}, {"q": "a\x00"}, {"p": "99999999999999999999"}, {"o": "99"},
        {"team__id__exact": "99999999999999999999"}, {"created_at__gte": "2026-02-30"},
        {"id__in": "1,abc"}, {"e": "1"},
    ):  # fmt: skip
        response = admin_session.get(path, query)
        _check(response, f"GET {path}?{query}", None, problems)
    assert problems == []
