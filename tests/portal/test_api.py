"""REST API /api/v1/environments/: roles, bad input, idempotency, approvals, extend, teardown."""

from __future__ import annotations

import pytest

from audit.models import ChainEvent, OutboxEvent
from portal.models import Environment, EnvironmentRequest
from portal.services import queueing

pytestmark = pytest.mark.django_db
URL = "/api/v1/environments/"


def body(**overrides) -> dict:
    data = {
        "team": "payments",
        "name": "checkout",
        "env_class": "staging",
        "ttl_hours": 48,
        "cpu": 4,
        "memory_gib": 16,
    }
    data.update(overrides)
    return data


def test_anonymous_is_401(api):
    from rest_framework.test import APIClient

    response = APIClient().get(URL)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_create_returns_201_with_location_and_is_listed(api):
    alice = api("engineer", sub="alice", team="payments")
    response = alice.post(URL, body(), format="json")
    assert response.status_code == 201, response.json()
    env = response.json()
    assert env["status"] == "PENDING_APPROVAL" and env["namespace"] == "payments-checkout"
    assert response["Location"] == f"{URL}{env['id']}/"
    listed = alice.get(URL).json()
    assert listed["count"] == 1 and listed["results"][0]["id"] == env["id"]
    assert alice.get(f"{URL}{env['id']}/").json()["request"]["cpu"] == 4


@pytest.mark.parametrize(
    "payload, field",
    [
        (body(name="Bad_Name"), "name"),
        (body(cpu="4"), "cpu"),
        (body(cpu=True), "cpu"),
        (body(memory_gib=-5), "memory_gib"),
        (body(gpu=100000), "gpu"),
        (body(env_class="ephemeral", ttl_hours=500), "ttl_hours"),
        (body(colour="blue"), "colour"),
        (body(spot_node_pool="yes"), "spot_node_pool"),
    ],
    ids=[
        "not-dns",
        "string-number",
        "bool-number",
        "negative",
        "absurd",
        "ttl-over-class",
        "unknown-field",
        "string-bool",
    ],
)
def test_bad_input_is_400_per_field_and_creates_nothing(api, payload, field):
    alice = api("engineer", sub="alice", team="payments")
    response = alice.post(URL, payload, format="json")
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]
    assert Environment.objects.count() == 0 and EnvironmentRequest.objects.count() == 0
    assert OutboxEvent.objects.filter(action__startswith="portal.").count() == 0


def test_one_400_names_every_bad_field_at_once(api):
    alice = api("engineer", sub="alice", team="payments")
    payload = body(name="Bad_Name", gpu=-1, ttl_hours=99999, memory_gib="8", colour="blue")
    del payload["cpu"]
    response = alice.post(URL, payload, format="json")
    assert response.status_code == 400
    fields = response.json()["extra"]["fields"]
    assert set(fields) == {"name", "cpu", "memory_gib", "gpu", "colour", "ttl_hours"}
    assert "DNS-1123" in fields["name"][0] and fields["colour"] == ["Unknown field."]
    assert fields["cpu"] == ["This field is required."]
    assert "exceeds the" in fields["ttl_hours"][0]
    assert Environment.objects.count() == 0


def test_malformed_json_is_400(api):
    alice = api("engineer", sub="alice", team="payments")
    response = alice.post(URL, data='{"team": ', content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "malformed"
    assert Environment.objects.count() == 0


def test_idempotency_key_retry_creates_nothing_new(api):
    alice = api("engineer", sub="alice", team="payments")
    first = alice.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="abc-1")
    second = alice.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="abc-1")
    assert first.status_code == 201 and second.status_code == 200
    assert second["Idempotent-Replayed"] == "true"
    assert first.json()["id"] == second.json()["id"]
    assert Environment.objects.count() == 1
    assert OutboxEvent.objects.filter(action="portal.environment.submitted").count() == 1
    reused = alice.post(URL, body(cpu=8), format="json", HTTP_IDEMPOTENCY_KEY="abc-1")
    assert reused.status_code == 422 and reused.json()["code"] == "idempotency_key_reused"
    assert Environment.objects.count() == 1


def test_engineer_of_another_team_cannot_create_or_see(api):
    alice = api("engineer", sub="alice", team="payments")
    bob = api("engineer", sub="bob", team="search")
    created = alice.post(URL, body(), format="json").json()
    assert bob.post(URL, body(), format="json").status_code == 403
    assert bob.get(f"{URL}{created['id']}/").status_code == 404
    assert bob.get(URL).json()["count"] == 0
    assert bob.delete(f"{URL}{created['id']}/").status_code == 404


def test_approval_flow_roles_self_approval_and_double_approval(api):
    alice = api("engineer", "approver", sub="alice", team="payments")
    carol = api("approver", sub="carol", team="payments")
    bob = api("engineer", sub="bob", team="payments")
    env = alice.post(URL, body(), format="json").json()
    own = alice.post(f"{URL}{env['id']}/approve/", {}, format="json")
    assert own.status_code == 403 and own.json()["code"] == "self_approval_forbidden"
    assert bob.post(f"{URL}{env['id']}/approve/", {}, format="json").status_code == 403
    ok = carol.post(f"{URL}{env['id']}/approve/", {"reason": "fine"}, format="json")
    assert ok.status_code == 200 and ok.json()["status"] in ("APPROVED", "PROVISIONING", "READY")
    again = carol.post(f"{URL}{env['id']}/approve/", {}, format="json")
    assert again.status_code == 409


def test_prod_needs_two_distinct_approvers_over_the_api(api):
    alice = api("engineer", sub="alice", team="payments")
    env = alice.post(
        URL,
        body(env_class="prod", ttl_hours=2000, justification="payments launch for the EU region"),
        format="json",
    ).json()
    carol = api("approver", sub="carol", team="payments")
    dave = api("approver", sub="dave", team="payments")
    assert (
        carol.post(f"{URL}{env['id']}/approve/", {}, format="json").json()["status"]
        == "PENDING_APPROVAL"
    )
    assert (
        dave.post(f"{URL}{env['id']}/approve/", {}, format="json").json()["status"]
        != "PENDING_APPROVAL"
    )


def test_reject_requires_a_reason(api):
    alice = api("engineer", sub="alice", team="payments")
    carol = api("approver", sub="carol", team="payments")
    env = alice.post(URL, body(), format="json").json()
    missing = carol.post(f"{URL}{env['id']}/reject/", {}, format="json")
    assert missing.status_code == 400 and "reason" in missing.json()["extra"]["fields"]
    assert Environment.objects.get().status == "PENDING_APPROVAL"
    done = carol.post(f"{URL}{env['id']}/reject/", {"reason": "use dev"}, format="json")
    assert done.json()["status"] == "REJECTED"
    dave = api("approver", sub="dave", team="payments")
    late = dave.post(f"{URL}{env['id']}/approve/", {}, format="json")
    assert late.status_code == 409 and late.json()["code"] == "illegal_transition"


def test_dev_is_ready_then_extend_and_delete(api, django_capture_on_commit_callbacks):
    alice = api("engineer", sub="alice", team="payments")
    with django_capture_on_commit_callbacks(execute=True):
        env = alice.post(URL, body(env_class="dev"), format="json").json()
    detail = alice.get(f"{URL}{env['id']}/").json()
    assert detail["status"] == "READY"
    assert [s["name"] for s in detail["steps"]] == ["compose", "manifest-policy", "apply", "ready"]
    applied = next(s for s in detail["steps"] if s["name"] == "apply")
    assert applied["detail"].endswith("objects applied to the simulated cluster"), applied
    assert detail["manifests"][0]["kind"] == "Namespace"
    extended = alice.post(f"{URL}{env['id']}/extend/", {"hours": 24}, format="json")
    assert extended.status_code == 200 and extended.json()["expires_at"] > detail["expires_at"]
    too_long = alice.post(f"{URL}{env['id']}/extend/", {"hours": 1000}, format="json")
    assert too_long.status_code == 400
    gone = alice.delete(f"{URL}{env['id']}/")
    assert gone.status_code == 202 and gone.json()["status"] == "EXPIRING"
    assert alice.delete(f"{URL}{env['id']}/").status_code == 202  # repeated: no change


def test_a_repeated_delete_queues_the_teardown_again(api, django_capture_on_commit_callbacks):
    """The first DELETE committed EXPIRING but its teardown task was never sent (the broker was
    down, the client got a 5xx and retries): the retry sends it, without another transition."""
    alice = api("engineer", sub="alice", team="payments")
    with django_capture_on_commit_callbacks(execute=True):
        env = alice.post(URL, body(env_class="dev"), format="json").json()
    with queueing.tasks_held() as lost, django_capture_on_commit_callbacks(execute=True):
        assert alice.delete(f"{URL}{env['id']}/").status_code == 202
    assert lost == [(queueing.TEARDOWN_TASK, Environment.objects.get().pk)]
    events = ChainEvent.objects.count() + OutboxEvent.objects.count()
    with queueing.tasks_held() as sent, django_capture_on_commit_callbacks(execute=True):
        again = alice.delete(f"{URL}{env['id']}/")
    assert again.status_code == 202 and again.json()["status"] == "EXPIRING"
    assert sent == lost
    assert ChainEvent.objects.count() + OutboxEvent.objects.count() == events  # no transition


def test_list_filters_and_pagination(api):
    alice = api("engineer", sub="alice", team="payments")
    for i in range(3):
        alice.post(URL, body(name=f"env{i}"), format="json")
    alice.post(URL, body(name="spotty", spot_node_pool=True), format="json")  # denied by policy
    page = alice.get(URL, {"limit": 2}).json()
    assert page["count"] == 4 and len(page["results"]) == 2 and page["next"]
    assert alice.get(URL, {"status": "denied"}).json()["count"] == 1
    assert alice.get(URL, {"status": "nonsense"}).status_code == 400
    assert alice.get(URL, {"env_class": "prod"}).json()["count"] == 0


@pytest.mark.parametrize("bad", ["abc", "1.5", "--1", "", "9" * 40, "\u0661"])
def test_estimate_names_every_field_that_is_not_a_whole_number(api, bad):
    alice = api("engineer", sub="alice", team="payments")
    response = alice.get(f"{URL}estimate/", {"ttl_hours": bad, "cpu": bad, "memory_gib": 4})
    assert response.status_code == 400
    fields = response.json()["extra"]["fields"]
    assert set(fields) == {"ttl_hours", "cpu"}
    assert "whole number" in fields["cpu"][0] and "invalid literal" not in str(fields)


def test_estimate_refuses_a_huge_ttl_by_its_class_limit_as_the_form_does(api):
    alice = api("engineer", sub="alice", team="payments")
    huge = "9" * 23
    response = alice.get(f"{URL}estimate/", {"env_class": "dev", "ttl_hours": huge})
    assert response.status_code == 400
    (said,) = response.json()["extra"]["fields"]["ttl_hours"]
    assert said.endswith("exceeds the dev limit of 336h."), said


def test_estimate_endpoint_prices_the_request(api):
    alice = api("engineer", sub="alice", team="payments")
    response = alice.get(
        f"{URL}estimate/", {"env_class": "dev", "ttl_hours": 10, "cpu": 8, "memory_gib": 16}
    )
    data = response.json()
    assert response.status_code == 200
    from decimal import Decimal

    from portal.services.cost import _general, price_table

    # 8 CPU / 4 vCPU per m6i.xlarge = 2 on-demand nodes; lifetime = hourly x 10 h
    node = _general(price_table()[0])
    assert Decimal(data["hourly"]) == 2 * node.on_demand
    assert Decimal(data["lifetime"]) == (2 * node.on_demand * 10).quantize(Decimal("0.01"))


def test_a_retried_create_queues_provisioning_again_while_approved(
    api, django_capture_on_commit_callbacks
):
    """The first POST committed APPROVED but its provisioning task was never sent (the broker
    was down; the client got a 5xx and retries with its Idempotency-Key): the retry sends it.
    Once READY, a retry sends nothing."""
    alice = api("engineer", sub="alice", team="payments")
    key = {"HTTP_IDEMPOTENCY_KEY": "retry-me"}
    with queueing.tasks_held() as lost, django_capture_on_commit_callbacks(execute=True):
        first = alice.post(URL, body(env_class="dev"), format="json", **key)
    assert first.status_code == 201 and first.json()["status"] == "APPROVED"
    assert lost == [(queueing.PROVISION_TASK, Environment.objects.get().pk)]
    with queueing.tasks_held() as sent, django_capture_on_commit_callbacks(execute=True):
        again = alice.post(URL, body(env_class="dev"), format="json", **key)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert sent == lost
    with django_capture_on_commit_callbacks(execute=True):  # the worker runs it: READY
        alice.post(URL, body(env_class="dev"), format="json", **key)
    assert Environment.objects.get().status == "READY"
    with queueing.tasks_held() as after, django_capture_on_commit_callbacks(execute=True):
        assert alice.post(URL, body(env_class="dev"), format="json", **key).status_code == 200
    assert after == [] and Environment.objects.count() == 1


def test_a_replayed_key_answers_only_what_a_get_would_after_the_caller_left_the_team(
    api, django_capture_on_commit_callbacks
):
    """Alice submits with a key, then her token names another team (she left payments): the
    replay is the GET's 404, and her retry queues nothing."""
    alice = api("engineer", sub="alice", team="payments")
    key = {"HTTP_IDEMPOTENCY_KEY": "left-the-team"}
    with queueing.tasks_held() as lost, django_capture_on_commit_callbacks(execute=True):
        first = alice.post(URL, body(env_class="dev"), format="json", **key)
    assert first.status_code == 201 and first.json()["status"] == "APPROVED"
    assert len(lost) == 1
    moved = api("engineer", sub="alice", team="search")
    with queueing.tasks_held() as sent, django_capture_on_commit_callbacks(execute=True):
        replay = moved.post(URL, body(env_class="dev"), format="json", **key)
        reused = moved.post(URL, body(env_class="dev", cpu=8), format="json", **key)
    get = moved.get(f"{URL}{first.json()['id']}/")
    assert get.status_code == 404
    assert replay.status_code == 404 and replay.json() == get.json()
    assert "Idempotent-Replayed" not in replay
    assert sent == []
    # Reusing the key with another body still says so, without naming the hidden environment.
    assert reused.status_code == 422 and reused.json()["extra"] == {}
    assert Environment.objects.count() == 1
    assert Environment.objects.get().status == "APPROVED"
