"""Defects schemathesis found, each pinned by the smallest request that showed it."""

from __future__ import annotations

import pytest

from canary.models import Rollout, RolloutStatus, Service
from kiln.identity.models import Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(settings):
    """The simulated cluster with namespace `shop` of team payments and its service `checkout`."""
    from kiln.cluster.backends import get_backend

    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    settings.KILN_CHAOS_AUTORUN = False
    Team.objects.create(slug="payments", name="Payments")
    get_backend().apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "shop", "labels": {"kiln.dev/team": "payments"}},
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "checkout", "namespace": "shop"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
            },
        ]
    )


@pytest.fixture
def engineer(api_client_for):
    return api_client_for("engineer", sub="erin", team="payments")


SERVICE = {"team": "payments", "name": "checkout", "namespace": "shop", "metrics_source": "push"}


def test_a_number_where_the_schema_says_string_is_a_400_and_creates_nothing(api_client_for):
    # Was 201 with name "0": DRF's CharField turns numbers into strings.
    admin = api_client_for("platform-admin", sub="root")
    response = admin.post("/api/v1/teams/", {"slug": "ops", "name": 0}, format="json")
    assert response.status_code == 400
    assert response.json()["extra"]["fields"] == {"name": ["Not a valid string."]}
    assert not Team.objects.filter(slug="ops").exists()


def test_a_number_as_an_abort_reason_is_a_400_and_the_rollout_keeps_running(cluster, engineer):
    service = engineer.post("/api/v1/canary/services/", SERVICE, format="json").json()
    rollout = engineer.post(
        "/api/v1/rollouts/",
        {"service": service["id"], "baseline_version": "v1", "canary_version": "v2"},
        format="json",
    ).json()
    response = engineer.post(
        f"/api/v1/rollouts/{rollout['id']}/abort/", {"reason": 0}, format="json"
    )
    assert response.status_code == 400 and "reason" in response.json()["extra"]["fields"]
    assert Rollout.objects.get(pk=rollout["id"]).status == RolloutStatus.PENDING


def test_registering_a_service_twice_is_a_409_conflict_not_a_400(cluster, engineer):
    # Was 400 "__all__": full_clean's unique check ran before the service's own Conflict.
    assert engineer.post("/api/v1/canary/services/", SERVICE, format="json").status_code == 201
    again = engineer.post("/api/v1/canary/services/", SERVICE, format="json")
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    assert Service.objects.filter(namespace="shop", name="checkout").count() == 1


@pytest.mark.parametrize("value", ["null", "yes", "on", "1", ""])
def test_an_estimate_flag_other_than_true_or_false_is_a_400_naming_it(engineer, value):
    # Was 200: anything but "1", "true" or "on" silently meant false.
    response = engineer.get("/api/v1/environments/estimate/", {"database": value})
    assert response.status_code == 400
    assert response.json()["extra"]["fields"] == {"database": ["true or false"]}


def test_estimate_flags_true_and_false_still_price_the_request(engineer):
    with_db = engineer.get("/api/v1/environments/estimate/", {"database": "true"}).json()
    without = engineer.get("/api/v1/environments/estimate/", {"database": "false"}).json()
    assert any(line["item"].startswith("PostgreSQL") for line in with_db["lines"])
    assert not any(line["item"].startswith("PostgreSQL") for line in without["lines"])


def test_an_all_digit_namespace_is_a_dns_label_for_chaos(cluster, engineer):
    # Was "a DNS-1123 label": "0".islower() is False, so digits-only names were refused.
    body = {
        "name": "kill",
        "namespace": "0",
        "selector": {"app": "web"},
        "fault": "pod-kill",
        "duration_seconds": 60,
        "max_duration_seconds": 120,
        "max_pods": 1,
    }
    response = engineer.post("/api/v1/chaos/experiments/", body, format="json")
    assert response.status_code == 400
    assert response.json()["extra"]["fields"]["namespace"] != "a DNS-1123 label"


def test_an_unknown_rollout_status_filter_is_a_400(engineer):
    # Was 200 with an empty list: a typo looked like "no rollouts".
    response = engineer.get("/api/v1/rollouts/", {"status": "runing"})
    assert response.status_code == 400 and "status" in response.json()["extra"]["fields"]
    assert engineer.get("/api/v1/rollouts/", {"status": "running"}).status_code == 200


@pytest.mark.parametrize("url", ["/api/v1/chaos/experiments/", "/api/v1/rollouts/"])
@pytest.mark.parametrize("value", ["", "nonsense", "RUNNING "])
def test_a_status_filter_outside_its_enum_is_a_400_the_empty_one_too(api_client_for, url, value):
    Team.objects.create(slug="payments", name="Payments")
    client = api_client_for("engineer", sub="alice", team="payments")
    answer = client.get(url, {"status": value})
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert body["code"] == "invalid_parameter" and "status" in body["extra"]["fields"]
    assert client.get(url).status_code == 200  # absent: no filter
