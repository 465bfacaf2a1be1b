"""Tenant audit evidence: the sink (auth, validation, idempotency), the archive's hashes in the
chain and tamper detection, teardown waiting for the last event (and its timeout), and the
simulated cluster's tenant API server posting over real HTTP."""

from __future__ import annotations

import json
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from audit.models import ChainEvent, OutboxEvent
from kiln.cluster import ref_of
from kiln.cluster.simulated import SimulatedBackend
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep, TenantAuditEvent, TenantAuditToken
from portal.services import environment_request_submit, environment_teardown
from portal.services import environment_teardown_request as teardown_request
from portal.services import teardown as teardown_service
from portal.services.queueing import tasks_held
from portal.services.tenant_audit import tenant_audit_export, tenant_audit_token_issue
from portal.tenant_apiserver_sim import TenantApiServerSim, audit_event, http_poster
from tests.audit.conftest import wipe_chain
from tests.portal.conftest import drain_audit, request_data

pytestmark = pytest.mark.django_db
SINK = "/hooks/tenant-audit/{}/"
ARCHIVED = "portal.environment.tenant_audit_archived"


def _env(people, django_capture_on_commit_callbacks, name="checkout") -> Environment:
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"],
            data=request_data(name=name, tenant_control_plane=True, database=True),
        )
    env.refresh_from_db()
    assert env.status == Status.READY, env.status_reason
    return env


def _event(name="web", verb="create", audit_id=None) -> dict:
    return {
        "auditID": audit_id or str(uuid.uuid4()),
        "stage": "ResponseComplete",
        "level": "Request",
        "verb": verb,
        "requestURI": f"/api/v1/namespaces/x/pods/{name}",
        "user": {"username": "system:serviceaccount:x:deployer"},
        "objectRef": {"resource": "pods", "namespace": "x", "name": name},
    }


def _batch(*items) -> bytes:
    return json.dumps(
        {"apiVersion": "audit.k8s.io/v1", "kind": "EventList", "items": items}
    ).encode()


def _post(env, token, body, client=None):
    return (client or Client()).post(
        SINK.format(env.public_id),
        body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )


def test_the_sink_authenticates_per_environment_and_keeps_only_a_hash(
    people, django_capture_on_commit_callbacks
):
    a = _env(people, django_capture_on_commit_callbacks, "checkout")
    b = _env(people, django_capture_on_commit_callbacks, "ledger")
    token_a, token_b = (
        tenant_audit_token_issue(environment=a),
        tenant_audit_token_issue(environment=b),
    )
    assert token_a not in TenantAuditToken.objects.get(environment=a).token_sha256
    assert _post(a, "", _batch(_event())).status_code == 401
    assert _post(a, "not-a-token", _batch(_event())).status_code == 401
    wrong = _post(b, token_a, _batch(_event()))  # A's token cannot post for B
    assert wrong.status_code == 403 and wrong.json()["code"] == "forbidden"
    assert TenantAuditEvent.objects.count() == 0
    assert _post(b, token_b, _batch(_event())).status_code == 200
    assert TenantAuditEvent.objects.filter(environment=b).count() == 1
    assert Client().get(SINK.format(a.public_id)).status_code == 405


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "JSON object"),
        (
            json.dumps({"apiVersion": "audit.k8s.io/v1beta1", "kind": "EventList", "items": [{}]}),
            "EventList",
        ),
        (
            json.dumps({"apiVersion": "audit.k8s.io/v1", "kind": "EventList", "items": []}),
            "non-empty",
        ),
        (_batch({**_event(), "auditID": ""}), "auditID"),
        (_batch({**_event(), "stage": "Sometime"}), "stage"),
        (_batch({**_event(), "level": "Loud"}), "level"),
        (_batch({**_event(), "user": "root"}), "user"),
        (_batch(_event(), "an event"), "items[1]"),
        (_batch({**_event(), "kind": "Pod"}), "Event"),
    ],
)
def test_bad_batches_are_a_400_with_the_reason_and_store_nothing(
    people, django_capture_on_commit_callbacks, body, reason
):
    env = _env(people, django_capture_on_commit_callbacks)
    token = tenant_audit_token_issue(environment=env)
    response = _post(env, token, body)
    assert response.status_code == 400 and reason in response.json()["message"], response.json()
    assert TenantAuditEvent.objects.count() == 0
    assert not OutboxEvent.objects.filter(action=ARCHIVED).exists()


def test_a_retried_batch_is_stored_once(people, django_capture_on_commit_callbacks):
    env = _env(people, django_capture_on_commit_callbacks)
    token = tenant_audit_token_issue(environment=env)
    first, second = _event("a"), _event("b")
    assert _post(env, token, _batch(first, second)).json()["accepted"] == 2
    again = _post(env, token, _batch(first, second, first)).json()
    assert again["accepted"] == 0 and again["duplicates"] == 3
    assert _post(env, token, _batch(second, _event("c"))).json()["accepted"] == 1
    assert list(TenantAuditEvent.objects.values_list("seq", flat=True)) == [1, 2, 3]
    assert OutboxEvent.objects.filter(action=ARCHIVED).count() == 2  # no event for a no-op batch


def test_the_archive_hash_is_in_the_chain_and_tampering_is_detected(
    people, django_capture_on_commit_callbacks
):
    env = _env(people, django_capture_on_commit_callbacks)
    token = tenant_audit_token_issue(environment=env)
    result = _post(env, token, _batch(_event("a"), _event("b"))).json()
    _post(env, token, _batch(_event("c")))
    drain_audit()
    chained = [json.loads(e.data) for e in ChainEvent.objects.filter(action=ARCHIVED)]
    assert [(c["count"], c["last_seq"]) for c in chained] == [(2, 2), (1, 3)]
    assert chained[0]["running_sha256"] == result["running_sha256"]
    assert tenant_audit_export(environment=env)["verified"]

    # Altered content: the stored hash no longer matches.
    row = TenantAuditEvent.objects.get(environment=env, seq=2)
    original = dict(row.event)
    row.event = {**original, "verb": "get"}
    row.save()
    problems = tenant_audit_export(environment=env)["problems"]
    assert any("event 2 was altered" in p for p in problems), problems
    # Altered and every hash recomputed: the running hash the chain holds differs.
    from portal import tenant_audit as ta

    running = ta.GENESIS
    for r in TenantAuditEvent.objects.filter(environment=env).order_by("seq"):
        r.event_sha256 = ta.event_sha256(r.event)
        running = r.running_sha256 = ta.running_sha256(running, r.event_sha256)
        r.save()
    problems = tenant_audit_export(environment=env)["problems"]
    assert any("differs from the one in the chain" in p for p in problems), problems
    # The last event removed: the chain records more events than the archive has.
    TenantAuditEvent.objects.filter(environment=env, seq=3).delete()
    problems = tenant_audit_export(environment=env)["problems"]
    assert any("event 3 is not in the archive" in p for p in problems), problems
    with pytest.raises(CommandError, match="does not verify"):
        call_command("tenant_audit_export", env.public_id)


def _tear_down_until_acknowledged(env, people):
    teardown_request(actor=people["alice"], environment=env, reason="done")
    return environment_teardown(environment_id=env.pk)


def test_teardown_waits_for_the_tenant_event_of_every_deletion(
    people, django_capture_on_commit_callbacks
):
    env = _env(people, django_capture_on_commit_callbacks)
    token = tenant_audit_token_issue(environment=env)
    assert _tear_down_until_acknowledged(env, people) == "pending"
    step = ProvisioningStep.objects.get(environment=env, name="tenant-audit-acknowledged")
    assert step.status != ProvisioningStep.DONE and step.detail.startswith("since:")
    tcp = ("kamaji.clastix.io/v1alpha1", "TenantControlPlane", env.namespace, env.namespace)
    assert SimulatedBackend().get(*tcp) is not None  # the control plane stays meanwhile
    assert environment_teardown(environment_id=env.pk) == "pending"
    deleted = [
        ref_of(m)
        for m in env.manifests
        if ref_of(m).namespace == env.namespace
        and ref_of(m).kind in teardown_service.c.WORKLOAD_KINDS
    ]
    assert deleted
    other = audit_event("delete", ref_of(env.manifests[0]))  # not one teardown waits for
    assert _post(env, token, _batch(other)).status_code == 200
    assert environment_teardown(environment_id=env.pk) == "pending"
    assert not OutboxEvent.objects.filter(action="portal.environment.workloads_removed").exists()
    assert (
        _post(env, token, _batch(*(audit_event("delete", r) for r in deleted))).status_code == 200
    )
    assert environment_teardown(environment_id=env.pk) == "pending"  # now the chain's own wait
    drain_audit()
    assert environment_teardown(environment_id=env.pk) == "deleted"
    assert SimulatedBackend().get(*tcp) is None
    step.refresh_from_db()
    assert step.status == ProvisioningStep.DONE and "acknowledged" in step.detail
    assert not ChainEvent.objects.filter(
        action="portal.environment.tenant_audit_incomplete"
    ).exists()
    assert ChainEvent.objects.filter(action="portal.environment.workloads_removed").exists()


def test_teardown_goes_on_after_the_timeout_and_audits_incomplete_evidence(
    people, django_capture_on_commit_callbacks, settings
):
    env = _env(people, django_capture_on_commit_callbacks)
    tenant_audit_token_issue(environment=env)
    settings.KILN_TENANT_AUDIT_ACK_SECONDS = 3600
    assert _tear_down_until_acknowledged(env, people) == "pending"
    settings.KILN_TENANT_AUDIT_ACK_SECONDS = 0
    assert environment_teardown(environment_id=env.pk) == "pending"  # the chain's own wait
    drain_audit()
    assert environment_teardown(environment_id=env.pk) == "deleted"
    incomplete = ChainEvent.objects.get(action="portal.environment.tenant_audit_incomplete")
    assert incomplete.target == f"portal.environment:{env.public_id}"
    step = ProvisioningStep.objects.get(environment=env, name="tenant-audit-acknowledged")
    assert "evidence may be incomplete" in step.detail


@pytest.fixture
def _chain_emptied_afterwards(transactional_db):
    """The flush after a transactional test cannot TRUNCATE the chain: empty it first."""
    yield
    wipe_chain()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_chain_emptied_afterwards")
def test_the_simulated_tenant_api_server_posts_over_http_and_teardown_waits_for_it(
    people, django_capture_on_commit_callbacks, live_server, monkeypatch
):
    tokens: dict[str, str] = {}
    sim = TenantApiServerSim(
        SimulatedBackend(), http_poster(f"{live_server.url}/hooks/tenant-audit", tokens)
    )
    monkeypatch.setattr("portal.services.provisioning.get_backend", lambda: sim)
    monkeypatch.setattr("portal.services.teardown._get_backend", lambda: sim)
    env = _env(people, django_capture_on_commit_callbacks)
    tokens[env.public_id] = tenant_audit_token_issue(environment=env)
    # A later apply into the tenant's namespace (a re-sync) is audited by its API server.
    sim.apply([m for m in env.manifests if m["kind"] == "ResourceQuota"])
    assert TenantAuditEvent.objects.filter(environment=env, event__verb="patch").exists()
    with tasks_held():  # this test is the worker: it runs the teardown steps itself
        teardown_request(actor=people["alice"], environment=env, reason="done")
    result = environment_teardown(environment_id=env.pk)
    drain_audit()
    result = environment_teardown(environment_id=env.pk) if result == "pending" else result
    assert result == "deleted"
    env.refresh_from_db()
    step = ProvisioningStep.objects.get(environment=env, name="tenant-audit-acknowledged")
    assert "deletions acknowledged" in step.detail and not step.detail.startswith("0 ")
    # After the environment is gone an auditor still reads and verifies its archive.
    export = tenant_audit_export(environment=env)
    assert export["status"] == "DELETED" and export["verified"], export["problems"]
    assert {e["event"]["verb"] for e in export["events"]} == {"patch", "delete"}
    assert sum(b["count"] for b in export["chained_batches"]) == len(export["events"])
