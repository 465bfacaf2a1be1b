"""Rollout REST API: role checks, bad input, the push endpoint and the Prometheus source."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from rest_framework.test import APIClient

from audit.models import OutboxEvent
from canary import services
from canary.models import MetricsSource, Observation, Rollout, RolloutStatus, RolloutTick
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


class _Prometheus(BaseHTTPRequestHandler):
    """Speaks /api/v1/query: vectors for Istio request counts and duration buckets per version."""

    queries: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        query = parse_qs(url.query).get("query", [""])[0]
        type(self).queries.append(query)
        canary = 'version="v2"' in query
        if url.path != "/api/v1/query":
            self.send_response(404)
            self.end_headers()
            return
        if "bucket" in query:
            counts = (
                [(50, 20), (100, 60), (250, 95), ("+Inf", 100)]
                if canary
                else [(50, 400), (100, 1200), (250, 1900), ("+Inf", 2000)]
            )
            result = [{"metric": {"le": str(le)}, "value": [1.0, str(c)]} for le, c in counts]
        elif "response_code" in query:
            result = [{"metric": {}, "value": [1.0, "2" if canary else "20"]}]
        else:
            result = [{"metric": {}, "value": [1.0, "100" if canary else "2000"]}]
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    _Prometheus.queries = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_prometheus_source_reads_both_arms_with_the_configured_promql(teams, prometheus, settings):
    settings.KILN_PROMETHEUS_URL = prometheus
    service = services.service_create(
        actor=ADMIN,
        team=teams["payments"],
        name="cart",
        namespace="shop",
        metrics_source=MetricsSource.PROMETHEUS,
        queries={
            "requests": 'sum(rate(http_requests_total{app="{{service}}",version="{{version}}"}'
            "[{{window}}]))"
        },
    )
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", tick_seconds=30
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "continue"
    tick = RolloutTick.objects.get(rollout=rollout, number=1)
    assert tick.evidence["errors"] == [2000.0, 100.0, 22.0, 2.0]
    assert tick.evidence["baseline_error_rate"] == pytest.approx(0.01)
    # Latency from buckets: every bucket count is a sample at its bound (under the cap).
    assert tick.evidence["median"][:2] == [2000.0, 100.0]
    assert 'sum(rate(http_requests_total{app="cart",version="v2"}[30s]))' in _Prometheus.queries
    assert any("istio_request_duration_milliseconds_bucket" in q for q in _Prometheus.queries)


def test_a_prometheus_outage_is_a_tick_without_evidence(teams, settings):
    settings.KILN_PROMETHEUS_URL = "http://127.0.0.1:9"
    service = services.service_create(
        actor=ADMIN,
        team=teams["payments"],
        name="cart",
        namespace="shop",
        metrics_source=MetricsSource.PROMETHEUS,
    )
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    # The metrics error is recorded as no evidence; the analysis clock runs on.
    assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "continue"
    rollout.refresh_from_db()
    tick = rollout.ticks.get(number=1)
    assert rollout.ticks_done == 1 and tick.evidence["missing"] is True
    assert "metrics unavailable" in tick.evidence["note"]
    assert tick.decision["channels"]["errors"]["llr"] == 0.0
