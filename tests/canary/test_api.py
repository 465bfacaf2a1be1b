"""Rollout REST API: role checks, bad input, the push endpoint and the Prometheus source."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import OutboxEvent
from canary import services
from canary.models import MetricsSource, Observation, Rollout, RolloutStatus, RolloutTick
from kiln.errors import InvalidInput
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace

pytestmark = pytest.mark.django_db

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))


@pytest.fixture
def teams() -> dict[str, Team]:
    teams = {
        "payments": Team.objects.create(slug="payments", name="Payments"),
        "search": Team.objects.create(slug="search", name="Search"),
    }
    own_namespace("shop", "payments")
    return teams


@pytest.fixture
def service(teams):
    return services.service_create(
        actor=ADMIN, team=teams["payments"], name="checkout", namespace="shop"
    )


@pytest.fixture
def alice(api_client_for):
    return api_client_for("engineer", sub="alice", team="payments")


def _canary_events() -> int:
    return OutboxEvent.objects.filter(action__startswith="canary.").count()


def _create(client, service, **kw):
    body = {"service": str(service.pk), "baseline_version": "v1", "canary_version": "v2", **kw}
    return client.post("/api/v1/rollouts/", body, format="json")


def test_anonymous_callers_are_refused(service):
    assert APIClient().get("/api/v1/rollouts/").status_code == 401
    response = _create(APIClient(), service)
    assert response.status_code == 401 and Rollout.objects.count() == 0


def test_an_engineer_of_the_team_creates_a_rollout(alice, service):
    response = _create(alice, service, steps=[10, 50, 100], ticks_per_step=4)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "pending" and body["steps"] == [10, 50, 100]
    rollout = Rollout.objects.get(pk=body["id"])
    event = OutboxEvent.objects.get(action="canary.rollout.created")
    assert event.actor == "alice" and event.target == f"canary.rollout:{rollout.pk}"


@pytest.mark.parametrize(
    ("roles", "team"),
    [(("engineer",), "search"), (("approver",), "payments"), (("auditor",), None)],
    ids=["engineer-of-another-team", "approver", "auditor"],
)
def test_others_cannot_create_rollouts(api_client_for, service, roles, team):
    client = api_client_for(*roles, sub="mallory", team=team)
    events = _canary_events()
    response = _create(client, service)
    # The other team's engineer cannot even see the service: 404, like a missing one.
    assert response.status_code in (403, 404)
    assert response.json()["code"] in ("forbidden", "not_found")
    assert Rollout.objects.count() == 0 and _canary_events() == events


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"steps": [50, 25, 100]}, "steps"),
        ({"steps": "fast"}, "steps"),
        ({"ticks_per_step": -1}, "ticks_per_step"),
        ({"canary_version": "V2!"}, "canary_version"),
        ({"canary_version": "v1"}, "canary_version"),
        ({"config": {"cusum_threshold": -1}}, "config"),
    ],
    ids=[
        "unsorted-steps",
        "steps-not-a-list",
        "negative-ticks",
        "bad-version",
        "same-version",
        "bad-config",
    ],
)
def test_bad_input_is_a_400_with_the_field_and_changes_nothing(alice, service, body, field):
    events = _canary_events()
    response = _create(alice, service, **body)
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]
    assert Rollout.objects.count() == 0 and _canary_events() == events


def test_rollouts_of_other_teams_are_invisible(api_client_for, alice, service):
    rollout_id = _create(alice, service).json()["id"]
    bob = api_client_for("engineer", sub="bob", team="search")
    assert bob.get(f"/api/v1/rollouts/{rollout_id}/").status_code == 404
    assert bob.get("/api/v1/rollouts/").json()["results"] == []
    assert [r["id"] for r in alice.get("/api/v1/rollouts/").json()["results"]] == [rollout_id]
    auditor = api_client_for("auditor", sub="erin")
    detail = auditor.get(f"/api/v1/rollouts/{rollout_id}/").json()
    assert detail["rollout"]["id"] == rollout_id and detail["ticks"] == []


def test_the_list_is_paged_newest_first_with_every_rollout_once(alice, teams):
    ids = []
    for i in range(5):  # one open rollout a service: five services
        service = services.service_create(
            actor=ADMIN, team=teams["payments"], name=f"svc{i}", namespace="shop"
        )
        ids.append(_create(alice, service).json()["id"])
    first = alice.get("/api/v1/rollouts/", {"limit": 2}).json()
    assert first["count"] == 5 and first["previous"] is None
    assert [r["id"] for r in first["results"]] == ids[::-1][:2]
    assert first["next"].endswith("/api/v1/rollouts/?limit=2&offset=2")
    seen = [r["id"] for r in first["results"]]
    url = first["next"]
    while url:
        page = alice.get(url).json()
        seen += [r["id"] for r in page["results"]]
        url = page["next"]
    assert seen == ids[::-1]  # every rollout once, newest first
    pending = alice.get("/api/v1/rollouts/", {"status": "pending", "limit": 1}).json()
    assert pending["count"] == 5 and len(pending["results"]) == 1
    assert pending["results"][0]["service"]["name"] == "svc4"
    assert alice.get("/api/v1/rollouts/").json()["count"] == 5  # default limit 50


@pytest.mark.parametrize(
    "query", [{"limit": 0}, {"limit": 501}, {"limit": "ten"}, {"offset": -1}, {"offset": "x"}]
)
def test_a_bad_page_is_a_400_naming_the_parameter(alice, service, query):
    _create(alice, service)
    response = alice.get("/api/v1/rollouts/", query)
    assert response.status_code == 400
    assert set(response.json()["extra"]["fields"]) == set(query)


def test_abort_is_for_engineers_of_the_team(api_client_for, alice, service):
    rollout_id = _create(alice, service).json()["id"]
    services.rollout_tick(rollout_id=rollout_id, tick=0)
    carol = api_client_for("approver", sub="carol", team="payments")
    response = carol.post(f"/api/v1/rollouts/{rollout_id}/abort/", {}, format="json")
    assert response.status_code == 403
    assert Rollout.objects.get(pk=rollout_id).status == RolloutStatus.RUNNING
    response = alice.post(
        f"/api/v1/rollouts/{rollout_id}/abort/", {"reason": "bad smell"}, format="json"
    )
    assert response.status_code == 200 and response.json()["status"] == "aborted"
    event = OutboxEvent.objects.get(action="canary.rollout.aborted")
    assert event.actor == "alice" and event.data["reason"] == "bad smell"
    again = alice.post(f"/api/v1/rollouts/{rollout_id}/abort/", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "illegal_transition"


def test_manual_promotion_is_for_approvers_and_platform_admins(api_client_for, alice, service):
    rollout_id = _create(alice, service).json()["id"]
    services.rollout_tick(rollout_id=rollout_id, tick=0)
    events = _canary_events()
    response = alice.post(f"/api/v1/rollouts/{rollout_id}/promote/", {}, format="json")
    assert response.status_code == 403
    assert Rollout.objects.get(pk=rollout_id).weight == 5 and _canary_events() == events
    carol = api_client_for("approver", sub="carol", team="payments")
    response = carol.post(f"/api/v1/rollouts/{rollout_id}/promote/", {}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "promoted" and response.json()["weight"] == 100
    assert OutboxEvent.objects.filter(action="canary.rollout.promoted", actor="carol").count() == 1


# --- the push endpoint ------------------------------------------------------------------


@pytest.fixture
def push_service(teams):
    return services.service_create(
        actor=ADMIN,
        team=teams["payments"],
        name="ledger",
        namespace="shop",
        metrics_source=MetricsSource.PUSH,
    )


def test_pushed_observations_feed_the_next_tick(alice, push_service):
    rollout_id = _create(alice, push_service).json()["id"]
    services.rollout_tick(rollout_id=rollout_id, tick=0)
    url = f"/api/v1/rollouts/{rollout_id}/observations/"
    for arm, requests, errors in (("baseline", 950, 9), ("canary", 50, 1), ("baseline", 50, 1)):
        body = {"arm": arm, "requests": requests, "errors": errors, "latencies_ms": [100.0, 120.0]}
        assert alice.post(url, body, format="json").status_code == 202
    assert services.rollout_tick(rollout_id=rollout_id, tick=1) == "continue"
    tick = RolloutTick.objects.get(rollout_id=rollout_id, number=1)
    # errors channel: (n_b, n_c, k, c) = (950 + 50, 50, 9 + 1 + 1, 1)
    assert tick.evidence["errors"] == [1000.0, 50.0, 11.0, 1.0]
    assert set(Observation.objects.values_list("consumed_tick", flat=True)) == {1}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"arm": "canary", "requests": 5, "errors": 6}, "errors"),
        ({"arm": "green", "requests": 5, "errors": 0}, "arm"),
        ({"arm": "canary", "requests": -1, "errors": 0}, "requests"),
        ({"arm": "canary", "requests": 5, "errors": 0, "latencies_ms": [-3]}, "latencies_ms"),
    ],
    ids=["errors-over-requests", "unknown-arm", "negative", "negative-latency"],
)
def test_bad_observations_are_refused_and_nothing_is_stored(alice, push_service, body, field):
    rollout_id = _create(alice, push_service).json()["id"]
    events = _canary_events()
    response = alice.post(f"/api/v1/rollouts/{rollout_id}/observations/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]
    assert Observation.objects.count() == 0 and _canary_events() == events


def test_pushing_to_a_simulated_service_is_a_conflict(alice, service):
    rollout_id = _create(alice, service).json()["id"]
    body = {"arm": "canary", "requests": 5, "errors": 0}
    response = alice.post(f"/api/v1/rollouts/{rollout_id}/observations/", body, format="json")
    assert response.status_code == 409 and Observation.objects.count() == 0


# --- Prometheus HTTP API ---------------------------------------------------------------


def test_a_query_template_that_is_not_a_series_selector_is_refused(teams, settings):
    # Kiln reads raw counter samples at each tick's boundaries: increase() over [{{window}}]
    # (the old templates) would extrapolate and is refused with the query named.
    settings.KILN_PROMETHEUS_URL = "http://127.0.0.1:9"
    before = OutboxEvent.objects.count()
    with pytest.raises(InvalidInput) as refused:
        services.service_create(
            actor=ADMIN,
            team=teams["payments"],
            name="cart",
            namespace="shop",
            metrics_source=MetricsSource.PROMETHEUS,
            queries={"requests": 'sum(rate(http_requests_total{app="{{service}}"}[{{window}}]))'},
        )
    assert "series selector" in refused.value.extra["fields"]["queries.requests"][0]
    assert OutboxEvent.objects.count() == before


def test_a_prometheus_outage_is_a_tick_without_evidence(teams, settings):
    settings.KILN_PROMETHEUS_URL = "http://127.0.0.1:9"
    service = services.service_create(
        actor=ADMIN,
        team=teams["payments"],
        name="cart",
        namespace="shop",
        metrics_source=MetricsSource.PROMETHEUS,
    )
    settings.KILN_PROMETHEUS_SCRAPE_SECONDS = 15  # nothing answers to tell it
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    # Started a tick ago, so tick 1's window has closed and the read reaches the server.
    rollout.decisions.filter(kind="started").update(
        created_at=timezone.now() - timedelta(minutes=1)
    )
    # The metrics error is recorded as no evidence; the analysis clock runs on.
    assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "continue"
    rollout.refresh_from_db()
    tick = rollout.ticks.get(number=1)
    assert rollout.ticks_done == 1 and tick.evidence["missing"] is True
    assert "metrics unavailable" in tick.evidence["note"]
    assert "Prometheus is unreachable" in tick.evidence["note"]
    assert tick.decision["channels"]["errors"]["llr"] == 0.0
