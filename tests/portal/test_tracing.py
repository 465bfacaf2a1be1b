"""One trace per environment request: every audit event from submission to READY carries the
trace of the submitting request, through the approval (another person's request) and the
provisioning task, and a re-queue from outside any request continues it."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind

from audit.models import OutboxEvent
from kiln.identity.models import Team
from kiln.observability import finished_spans, memory_exporter
from portal.models import Environment
from portal.services.provisioning import environment_provision

pytestmark = pytest.mark.django_db
URL = "/api/v1/environments/"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"


def _trace_ids(env: Environment) -> dict[str, set[str]]:
    by_action: dict[str, set[str]] = {}
    for action, trace_id in OutboxEvent.objects.filter(
        target=f"portal.environment:{env.public_id}"
    ).values_list("action", "trace_id"):
        by_action.setdefault(action, set()).add(trace_id)
    return by_action


@pytest.fixture
def clients(api_client_for):
    Team.objects.create(slug="payments", name="Payments")
    return (
        api_client_for("engineer", sub="alice", team="payments"),
        api_client_for("approver", sub="carol", team="payments"),
    )


def test_submission_approval_and_provisioning_carry_the_clients_trace(
    clients, django_capture_on_commit_callbacks
):
    alice, carol = clients
    memory_exporter.clear()
    body = {"team": "payments", "name": "traced", "env_class": "staging", "ttl_hours": 24}
    created = alice.post(
        URL, {**body, "cpu": 1, "memory_gib": 1}, format="json", HTTP_TRACEPARENT=CLIENT_PARENT
    )
    assert created.status_code == 201
    env = Environment.objects.get(public_id=created.json()["id"])
    assert env.traceparent.split("-")[1] == CLIENT_TRACE
    with django_capture_on_commit_callbacks(execute=True):
        approved = carol.post(f"{URL}{env.public_id}/approve/", {"reason": "ok"}, format="json")
    assert approved.status_code == 200
    env.refresh_from_db()
    assert env.status == "READY"
    by_action = _trace_ids(env)
    for action in (
        "portal.environment.submitted",
        "portal.environment.queued_for_approval",
        "portal.approval.recorded",
        "portal.environment.approved",
        "portal.environment.provisioning_started",
        "portal.provisioning_step.completed",
        "portal.environment.readied",
    ):
        assert action in by_action, sorted(by_action)
    assert set().union(*by_action.values()) == {CLIENT_TRACE}, by_action
    # The approver's own request is its own trace; the approval span links to it.
    (approve_server,) = [
        s
        for s in finished_spans()
        if s.kind == SpanKind.SERVER and "approve" in s.attributes.get("http.route", "")
    ]
    assert format(approve_server.context.trace_id, "032x") != CLIENT_TRACE
    (approve,) = [s for s in finished_spans() if s.name == "portal.environment.approve"]
    assert format(approve.context.trace_id, "032x") == CLIENT_TRACE
    assert [link.context.span_id for link in approve.links] == [approve_server.context.span_id]


def test_provisioning_requeued_outside_any_request_continues_the_trace(clients):
    alice, _ = clients
    body = {"team": "payments", "name": "later", "env_class": "dev", "ttl_hours": 24}
    created = alice.post(URL, {**body, "cpu": 1, "memory_gib": 1}, format="json")
    env = Environment.objects.get(public_id=created.json()["id"])
    submitted = env.traceparent.split("-")[1]
    assert len(submitted) == 32 and int(submitted, 16)
    # As the reaper's re-queue runs it: no request, no task context.
    assert environment_provision(environment_id=env.pk) == "ready"
    assert set().union(*_trace_ids(env).values()) == {submitted}
