"""The create's answer renders the environment as its transaction left it, without reading
again what that transaction cannot have (approvals, steps) or what the caller already is."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support.celery_conf import celery_conf

pytestmark = pytest.mark.django_db

BODY = {"team": "payments", "name": "checkout", "env_class": "dev", "ttl_hours": 24,
        "workload_class": "standard", "cpu": 1, "memory_gib": 1}  # fmt: skip


@pytest.fixture
def queued_not_run(settings):
    """Provisioning is queued on an in-memory broker and no worker takes it."""
    with celery_conf(task_always_eager=False, broker_url="memory://localhost/"):
        yield


@pytest.mark.parametrize("env_class", ["dev", "staging"])
def test_the_create_answers_what_a_get_then_reads(api, queued_not_run, env_class):
    engineer = api("engineer", sub="eng", team="payments")
    created = engineer.post(
        "/api/v1/environments/", {**BODY, "env_class": env_class}, format="json",
        HTTP_IDEMPOTENCY_KEY="k1",
    )  # fmt: skip
    assert created.status_code == 201, created.content
    detail = engineer.get(f"/api/v1/environments/{created.json()['id']}/")
    assert created.json() == detail.json()
    assert created["ETag"] == detail["ETag"]
    assert created.json()["requested_by"] == "eng"
    assert len(created.json()["policy_decisions"]) >= 3


def test_the_create_reads_neither_the_caller_nor_approvals_nor_steps_again(api, queued_not_run):
    engineer = api("engineer", sub="eng", team="payments")
    engineer.post("/api/v1/environments/", BODY, format="json")  # the caller's row exists now
    with CaptureQueriesContext(connection) as captured:
        created = engineer.post("/api/v1/environments/", {**BODY, "name": "two"}, format="json")
    assert created.status_code == 201, created.content
    reads = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT")]
    assert not [q for q in reads if "portal_approvaldecision" in q], reads
    assert not [q for q in reads if "portal_provisioningstep" in q], reads
    assert len([q for q in reads if 'FROM "auth_user"' in q]) == 1, reads  # authentication's


def test_a_replayed_create_reads_the_environment_as_it_is_now(api, queued_not_run):
    engineer = api("engineer", sub="eng", team="payments")
    approver = api("approver", sub="carol", team="payments")
    first = engineer.post(
        "/api/v1/environments/", {**BODY, "env_class": "staging"}, format="json",
        HTTP_IDEMPOTENCY_KEY="k2",
    )  # fmt: skip
    env_id = first.json()["id"]
    assert (
        approver.post(
            f"/api/v1/environments/{env_id}/approve/", {"reason": "ok"}, format="json"
        ).status_code
        == 200
    )
    again = engineer.post(
        "/api/v1/environments/", {**BODY, "env_class": "staging"}, format="json",
        HTTP_IDEMPOTENCY_KEY="k2",
    )  # fmt: skip
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert [a["approver"] for a in again.json()["approvals"]] == ["carol"]
