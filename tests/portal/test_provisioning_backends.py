"""Provisioning and teardown through the kubernetes (a real local API server) and gitops backends."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from kubernetes import client as k8s

from audit.models import ChainEvent
from kiln.cluster.base import USER_AGENT, secret_text
from kiln.cluster.kubernetes import KubernetesBackend
from kiln.cluster.simulated import SimulatedBackend
from kiln.cluster.simulated_tenant import (
    TenantAuditWebhook,
    audit_transport,
    http_transport,
    set_audit_transport,
)
from portal.models import Environment, ProvisioningStep, TenantAuditEvent, TenantAuditToken
from portal.services import (
    environment_request_submit,
    environment_teardown,
    environment_teardown_request,
)
from portal.services.tenant_audit import _digest
from tests.cluster.fake_kube import FakeKube
from tests.portal.conftest import drain_audit, request_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube():
    fake = FakeKube().start()
    yield fake
    fake.stop()


def _git(repo, *args) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def tenant_kube():
    """The tenant control plane's own API server, a second real local API server."""
    fake = FakeKube().start()
    yield fake
    fake.stop()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("chain_emptied_afterwards")
def test_provisioning_and_teardown_through_the_kubernetes_backend(
    kube, tenant_kube, people, settings, live_server, django_capture_on_commit_callbacks
):
    """The real kubernetes client against the host's and the tenant's API servers: the sink
    token reaches the Secret the tenant API server mounts, its audit webhook posts over HTTP
    with it, flow control is applied inside it, and teardown waits for its delete events."""
    settings.KILN_DELIVERY_BACKEND = "kubernetes"
    settings.KILN_KUBE_API_URL = kube.url
    settings.KILN_TENANT_AUDIT_SINK = f"{live_server.url}/hooks/tenant-audit"
    kube.tenant_url = tenant_kube.url  # Kamaji's admin kubeconfig names the tenant's server
    host = KubernetesBackend(k8s.ApiClient(k8s.Configuration(host=kube.url)), timeout=5)
    namespace = "payments-checkout"

    def audit_backend(verb, ref, code, user_agent):
        # The tenant API server's webhook: configured from the files its control plane mounts
        # (read from the host API server), posting to the sink over HTTP.
        TenantAuditWebhook(host, namespace, namespace, user_agent=user_agent).record(
            verb, [(ref, code)]
        )

    tenant_kube.on_write = audit_backend
    previous = audit_transport()
    set_audit_transport(http_transport)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            env, _ = environment_request_submit(
                actor=people["alice"], data=request_data(tenant_control_plane=True)
            )
        env.refresh_from_db()
        assert env.status == "READY", env.status_reason
        # The plan's objects, the sink token's Secret (never in the plan) and Kamaji's kubeconfig.
        assert len(kube.objects) == len(env.manifests) + 2
        secret = host.get("v1", "Secret", namespace, f"{namespace}-tenant-audit-token")
        token = secret_text(secret, "token")
        assert TenantAuditToken.objects.get(environment=env).token_sha256 == _digest(token)
        assert token not in json.dumps(env.manifests)
        flow = ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "", "kiln-tenant-sa-writes")
        assert tenant_kube.objects[flow]["spec"]["distinguisherMethod"] == {"type": "ByUser"}
        environment_teardown_request(actor=people["alice"], environment=env)
        deadline, result = time.monotonic() + 20, "pending"
        while result == "pending" and time.monotonic() < deadline:
            result = environment_teardown(environment_id=env.pk)
            drain_audit()
            time.sleep(0.05)
        assert result == "deleted"
    finally:
        set_audit_transport(previous)
    assert kube.objects == {} and tenant_kube.objects == {}
    assert Environment.objects.get(pk=env.pk).status == "DELETED"
    step = ProvisioningStep.objects.get(environment=env, name="tenant-audit-acknowledged")
    assert step.detail == "2 deletions acknowledged by the tenant API server"
    events = [e.event for e in TenantAuditEvent.objects.filter(environment=env).order_by("seq")]
    assert [e["verb"] for e in events] == ["patch", "patch", "delete", "delete"]
    assert {e["userAgent"] for e in events} == {USER_AGENT}  # the client's own User-Agent
    assert not ChainEvent.objects.filter(
        action="portal.environment.tenant_audit_incomplete"
    ).exists()


def test_provisioning_through_gitops_reaches_ready(
    people, settings, django_capture_on_commit_callbacks
):
    settings.KILN_DELIVERY_BACKEND = "gitops"
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"], data=request_data(tenant_control_plane=True)
        )
    env.refresh_from_db()
    assert env.status == "READY", env.status_reason
    files = _git(settings.KILN_GITOPS_REPO, "ls-tree", "-r", "--name-only", "main").split()
    assert files and all(f.startswith("environments/payments-checkout/platform/") for f in files)
    assert len(files) == len(env.manifests)
    # The sink token reached the observed cluster and never the repository, in any commit.
    observer = SimulatedBackend()
    secret = observer.get("v1", "Secret", env.namespace, f"{env.namespace}-tenant-audit-token")
    token = secret_text(secret, "token")
    assert token and not any("secret" in f for f in files)
    assert token not in _git(settings.KILN_GITOPS_REPO, "log", "-p", "--all")
