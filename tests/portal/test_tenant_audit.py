"""Tenant audit evidence: the sink (auth, validation, idempotency), the archive's hashes in the
chain and tamper detection, the sink token delivered into the Secret the tenant API server
mounts, teardown waiting for the tenant API server's events of its own deletions (and its
timeout), the simulated tenant API server posting over real HTTP, and the tenant's own activity
counted for idleness."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from audit.models import ChainEvent, OutboxEvent
from kiln.cluster import AppliedRef
from kiln.cluster.base import USER_AGENT, secret_text
from kiln.cluster.simulated import SimulatedBackend
from kiln.cluster.simulated_failures import inject_failure
from kiln.cluster.simulated_tenant import (
    audit_event,
    audit_transport,
    http_transport,
    set_audit_transport,
)
from portal import compose as c
from portal import tenant_audit as ta
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep, TenantAuditEvent, TenantAuditToken
from portal.services import environment_request_submit, environment_teardown
from portal.services import environment_teardown_request as teardown_request
from portal.services.notices import environments_warn_and_propose
from portal.services.pipeline import Outcome
from portal.services.provisioning import (
    environment_mark_failed,
    environment_provision,
    environment_spec,
)
from portal.services.queueing import tasks_held
from portal.services.tenant_audit import (
    _digest,
    tenant_audit_deliver,
    tenant_audit_export,
    tenant_audit_token_issue,
)
from portal.services.tenant_cluster import tenant_audit_token_deliver, tenant_namespace_exists
from tests.portal.conftest import drain_audit, request_data

pytestmark = pytest.mark.django_db
SINK = "/hooks/tenant-audit/{}/"
ARCHIVED = "portal.environment.tenant_audit_archived"


def _env(people, django_capture_on_commit_callbacks, name="checkout", tcp=False) -> Environment:
    """A READY environment (with a tenant control plane if `tcp`: its API server then audits
    Kiln's own requests to the sink in process, as the simulated cluster's does)."""
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"],
            data=request_data(name=name, tenant_control_plane=tcp, database=True),
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


TCP_KEY = ("kamaji.clastix.io/v1alpha1", "TenantControlPlane")
FLOW = "flowcontrol.apiserver.k8s.io/v1"


def _tenant(env):
    return SimulatedBackend().tenant(namespace=env.namespace, name=env.namespace)


@pytest.fixture
def transport():
    """Replace the simulated tenant API servers' transport for a test; put it back after."""
    previous = audit_transport()
    yield set_audit_transport
    set_audit_transport(previous)


def test_provisioning_delivers_the_sink_token_outside_the_plan_and_seeds_the_tenant_api_server(
    people, django_capture_on_commit_callbacks
):
    env = _env(people, django_capture_on_commit_callbacks, tcp=True)
    secret_name = f"{env.namespace}-tenant-audit-token"
    secret = SimulatedBackend().get("v1", "Secret", env.namespace, secret_name)
    token = secret_text(secret, c.TOKEN_KEY)
    assert token and TenantAuditToken.objects.get(environment=env).token_sha256 == _digest(token)
    assert token not in json.dumps(env.manifests)  # never in the plan, so never in Git
    assert "Secret" not in {m["kind"] for m in env.manifests}
    steps = {s.name: s for s in env.steps.all()}
    assert steps["tenant-audit-token"].status == "done"
    assert secret_name in steps["tenant-audit-token"].detail
    # The flow-control objects live inside the tenant's API server, not only in the host.
    flow = _tenant(env).get(FLOW, "FlowSchema", None, c.TENANT_FLOW_NAME)
    assert flow["spec"]["distinguisherMethod"] == {"type": "ByUser"}
    assert SimulatedBackend().get(FLOW, "FlowSchema", None, c.TENANT_FLOW_NAME) is None
    assert steps["tenant-flow-control"].status == "done"
    # Its API server audited Kiln's writes with the delivered token: they are in the archive.
    archived = [e.event for e in TenantAuditEvent.objects.filter(environment=env)]
    assert {(e["verb"], e["objectRef"]["resource"]) for e in archived} == {
        ("patch", "flowschemas"),
        ("patch", "prioritylevelconfigurations"),
    }
    assert {e["userAgent"] for e in archived} == {USER_AGENT}
    done = [
        e.data["step"]
        for e in OutboxEvent.objects.filter(action="portal.provisioning_step.completed").order_by(
            "id"
        )
    ]
    assert (
        done.index("tenant-audit-token") < done.index("tenant-flow-control") < done.index("ready")
    )


def test_the_token_waits_for_the_namespace_to_be_in_the_cluster(
    people, django_capture_on_commit_callbacks
):
    with tasks_held(), django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"], data=request_data(tenant_control_plane=True)
        )
    spec = environment_spec(environment=env)
    backend = SimulatedBackend()
    # As behind Argo CD before its sync: nothing in the cluster yet, so the step waits unstarted.
    assert not tenant_namespace_exists(backend=backend, environment=env)
    assert not TenantAuditToken.objects.filter(environment=env).exists()
    assert backend.list("v1", "Secret", env.namespace) == []
    backend.apply([m for m in c.compose(spec) if m["kind"] == "Namespace"])
    assert tenant_namespace_exists(backend=backend, environment=env)
    delivered = tenant_audit_token_deliver(environment=env, backend=backend, spec=spec)
    # The hash is kept with the step's record, after the Secret is written.
    assert delivered.outcome == Outcome.DONE
    assert not TenantAuditToken.objects.filter(environment=env).exists()
    delivered.record()
    secret = backend.get("v1", "Secret", env.namespace, c.audit_token_secret_name(spec))
    assert TenantAuditToken.objects.get(environment=env).token_sha256 == _digest(
        secret_text(secret, c.TOKEN_KEY)
    )


def test_ready_waits_for_the_tenant_api_server(people, django_capture_on_commit_callbacks):
    inject_failure("never_ready", kind="TenantControlPlane")
    with tasks_held(), django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"], data=request_data(tenant_control_plane=True)
        )
    assert environment_provision(environment_id=env.pk) == "pending"
    assert not env.steps.filter(name="tenant-flow-control").exists()


def test_teardown_waits_for_the_tenant_events_of_its_own_deletions(
    people, django_capture_on_commit_callbacks, transport
):
    env = _env(people, django_capture_on_commit_callbacks, tcp=True)
    held: list[tuple[str, str, bytes]] = []
    transport(lambda *batch: held.append(batch))  # the webhook's batches wait in its buffer
    teardown_request(actor=people["alice"], environment=env, reason="done")
    assert environment_teardown(environment_id=env.pk) == "pending"
    step = ProvisioningStep.objects.get(environment=env, name="tenant-audit-acknowledged")
    assert step.status != ProvisioningStep.DONE and step.detail.startswith("since:")
    assert SimulatedBackend().get(*TCP_KEY, env.namespace, env.namespace) is not None
    # Teardown deleted the flow-control objects through the tenant API server, once.
    assert _tenant(env).get(FLOW, "FlowSchema", None, c.TENANT_FLOW_NAME) is None
    assert len(held) == 2
    assert environment_teardown(environment_id=env.pk) == "pending"
    assert len(held) == 2  # waiting sends nothing more
    token = secret_text(
        SimulatedBackend().get(
            "v1", "Secret", env.namespace, f"{env.namespace}-tenant-audit-token"
        ),
        c.TOKEN_KEY,
    )
    other = audit_event(
        "delete", AppliedRef("v1", "Pod", "default", "web"), user={"username": "x"}, user_agent="k"
    )  # a deletion teardown does not wait for
    assert _post(env, token, _batch(other)).status_code == 200
    assert environment_teardown(environment_id=env.pk) == "pending"
    tenant_audit_deliver(*held[0])
    assert environment_teardown(environment_id=env.pk) == "pending"  # one of two acknowledged
    assert not OutboxEvent.objects.filter(action="portal.environment.workloads_removed").exists()
    tenant_audit_deliver(*held[1])
    assert environment_teardown(environment_id=env.pk) == "pending"  # now the chain's own wait
    drain_audit()
    assert environment_teardown(environment_id=env.pk) == "deleted"
    assert SimulatedBackend().get(*TCP_KEY, env.namespace, env.namespace) is None
    step.refresh_from_db()
    assert step.status == ProvisioningStep.DONE
    assert step.detail == "2 deletions acknowledged by the tenant API server"
    assert not ChainEvent.objects.filter(
        action="portal.environment.tenant_audit_incomplete"
    ).exists()


def test_teardown_goes_on_after_the_timeout_and_audits_incomplete_evidence(
    people, django_capture_on_commit_callbacks, settings, transport
):
    env = _env(people, django_capture_on_commit_callbacks, tcp=True)

    def unreachable(url, token, body):
        raise OSError("connection refused")

    transport(unreachable)
    settings.KILN_TENANT_AUDIT_ACK_SECONDS = 3600
    teardown_request(actor=people["alice"], environment=env, reason="done")
    assert environment_teardown(environment_id=env.pk) == "pending"
    settings.KILN_TENANT_AUDIT_ACK_SECONDS = 0
    assert environment_teardown(environment_id=env.pk) == "pending"  # the chain's own wait
    drain_audit()
    assert environment_teardown(environment_id=env.pk) == "deleted"
    incomplete = ChainEvent.objects.get(action="portal.environment.tenant_audit_incomplete")
    assert incomplete.target == f"portal.environment:{env.public_id}"
    assert json.loads(incomplete.data)["unacknowledged"] == [
        f"prioritylevelconfigurations -/{c.TENANT_FLOW_NAME}",
        f"flowschemas -/{c.TENANT_FLOW_NAME}",
    ]
    step = ProvisioningStep.objects.get(environment=env, name="tenant-audit-acknowledged")
    assert "evidence may be incomplete" in step.detail


def test_a_failed_environment_whose_api_server_never_served_has_nothing_to_wait_for(
    people, django_capture_on_commit_callbacks, settings
):
    inject_failure("never_ready", kind="TenantControlPlane")
    settings.KILN_TENANT_AUDIT_ACK_SECONDS = 3600
    with tasks_held(), django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"], data=request_data(tenant_control_plane=True)
        )
    assert environment_provision(environment_id=env.pk) == "pending"  # token delivered, no server
    environment_mark_failed(environment_id=env.pk, reason="not ready")
    env.refresh_from_db()
    with tasks_held():
        teardown_request(actor=people["alice"], environment=env, reason="failed")
    environment_teardown(environment_id=env.pk)
    step = ProvisioningStep.objects.get(environment=env, name="tenant-audit-acknowledged")
    assert step.status == "done" and "does not serve" in step.detail


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("chain_emptied_afterwards")
def test_the_simulated_tenant_api_server_posts_over_http_and_teardown_waits_for_it(
    people, django_capture_on_commit_callbacks, live_server, settings, transport
):
    settings.KILN_TENANT_AUDIT_SINK = f"{live_server.url}/hooks/tenant-audit"
    transport(http_transport)  # what kube-apiserver's webhook does: POST to the sink
    env = _env(people, django_capture_on_commit_callbacks, tcp=True)
    assert TenantAuditEvent.objects.filter(environment=env, event__verb="patch").count() == 2
    with tasks_held():  # this test is the worker: it runs the teardown steps itself
        teardown_request(actor=people["alice"], environment=env, reason="done")
    result = environment_teardown(environment_id=env.pk)
    drain_audit()
    result = environment_teardown(environment_id=env.pk) if result == "pending" else result
    assert result == "deleted"
    env.refresh_from_db()
    step = ProvisioningStep.objects.get(environment=env, name="tenant-audit-acknowledged")
    assert step.detail == "2 deletions acknowledged by the tenant API server"
    # After the environment is gone an auditor still reads and verifies its archive.
    export = tenant_audit_export(environment=env)
    assert export["status"] == "DELETED" and export["verified"], export["problems"]
    assert [e["event"]["verb"] for e in export["events"]] == ["patch"] * 2 + ["delete"] * 2
    assert sum(b["count"] for b in export["chained_batches"]) == len(export["events"])
    # Kiln's own requests are not the tenant's activity.
    assert env.last_activity_at is None


# --- the tenant's own activity ----------------------------------------------------------------


def _by(username: str, *, agent: str = "kubectl/v1.33.0", at=None) -> dict:
    event = audit_event(
        "create",
        AppliedRef("apps/v1", "Deployment", "default", "web"),
        user={"username": username},
        user_agent=agent,
        at=at,
    )
    return event


@pytest.mark.parametrize(
    ("username", "agent", "counts"),
    [
        ("alice@example.com", "kubectl/v1.33.0", True),
        ("system:serviceaccount:shop:deployer", "argocd/v3", True),
        ("kubernetes-admin", USER_AGENT, False),
        ("kubernetes-admin", f"{USER_AGENT}/1.0", False),
        ("system:kube-controller-manager", "kube-controller-manager/v1.33.0", False),
        ("system:node:ip-10-0-0-1", "kubelet/v1.33.0", False),
        ("system:serviceaccount:kube-system:generic-garbage-collector", "kcm", False),
        ("system:anonymous", "curl/8", False),
        ("", "curl/8", False),
    ],
    ids=[
        "a-person",
        "a-workloads-service-account",
        "kiln",
        "kiln-with-version",
        "controller-manager",
        "a-node",
        "kube-system-service-account",
        "anonymous",
        "no-user",
    ],
)
def test_what_counts_as_the_tenants_activity(username, agent, counts):
    assert ta.is_tenant_activity(_by(username, agent=agent), own_user_agent=USER_AGENT) is counts


def test_the_latest_activity_is_never_later_than_now():
    now = timezone.now()
    early, future = now - timedelta(hours=3), now + timedelta(days=1)
    events = [_by("alice", at=early), _by("system:node:n1", at=now), _by("bob", at=future)]
    assert ta.latest_activity(events, own_user_agent=USER_AGENT, now=now) == now
    assert ta.latest_activity(events[:2], own_user_agent=USER_AGENT, now=now) == early
    unreadable = {**_by("alice"), "stageTimestamp": "yesterday", "requestReceivedTimestamp": None}
    assert ta.latest_activity([unreadable], own_user_agent=USER_AGENT, now=now) == now
    assert ta.latest_activity(events[1:2], own_user_agent=USER_AGENT, now=now) is None


def test_the_tenants_own_requests_keep_an_environment_from_being_idle(
    people, django_capture_on_commit_callbacks
):
    env = _env(people, django_capture_on_commit_callbacks)
    token = tenant_audit_token_issue(environment=env)
    idle_after = timedelta(hours=48)  # dev (portal/conf.py)
    # Proposed idle: READY two days ago and nothing Kiln saw since.
    Environment.objects.filter(pk=env.pk).update(
        ready_at=timezone.now() - idle_after - timedelta(hours=1)
    )
    proposed_at = timezone.now()
    assert environments_warn_and_propose(now=proposed_at, dry_run=False)["idle_proposed"] == [
        env.public_id
    ]
    env.refresh_from_db()
    assert env.idle_proposed_at == proposed_at
    # Kiln's own requests and the control plane's are no tenant activity: nothing changes.
    noise = [_by("kubernetes-admin", agent=USER_AGENT), _by("system:kube-scheduler")]
    assert _post(env, token, _batch(*noise)).json()["accepted"] == 2
    env.refresh_from_db()
    assert env.last_activity_at is None and env.idle_proposed_at == proposed_at
    # A person at work in the tenant's cluster after the proposal withdraws it.
    at = timezone.now()
    assert _post(env, token, _batch(_by("alice@example.com", at=at))).status_code == 200
    env.refresh_from_db()
    assert env.last_activity_at == at and env.idle_proposed_at is None
    batch = OutboxEvent.objects.filter(action=ARCHIVED).order_by("id").last()
    assert batch.data["idle_proposal_withdrawn"] is True
    assert batch.data["tenant_activity_at"]
    # Idleness now counts from that activity, not from READY.
    later = at + idle_after - timedelta(minutes=1)
    assert environments_warn_and_propose(now=later, dry_run=True)["idle_proposed"] == []
    assert environments_warn_and_propose(now=at + idle_after, dry_run=True)["idle_proposed"] == [
        env.public_id
    ]
    # An older activity than the one recorded changes nothing.
    _post(env, token, _batch(_by("bob", at=at - timedelta(hours=1))))
    env.refresh_from_db()
    assert env.last_activity_at == at
