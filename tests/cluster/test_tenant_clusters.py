"""Secrets written outside any repository and the API servers of tenant control planes, on every
backend: the kubernetes client against real local API servers (the host's and the tenant's), the
simulated cluster (a tenant's objects apart from the host's, gone with the control plane, its
requests audited to the webhook its control plane mounts) and gitops (never commits a Secret)."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest
import yaml
from django.utils import timezone
from kubernetes import client as k8s

from kiln.cluster import AppliedRef, DeliveryError
from kiln.cluster.base import USER_AGENT, secret_text
from kiln.cluster.gitops import GitOpsBackend
from kiln.cluster.kubernetes import KubernetesBackend
from kiln.cluster.models import SimulatedObject
from kiln.cluster.simulated import SimulatedBackend
from kiln.cluster.simulated_tenant import (
    TenantAuditWebhook,
    audit_transport,
    set_audit_transport,
)
from tests.cluster.fake_kube import FakeKube

pytestmark = pytest.mark.django_db

TCP = ("kamaji.clastix.io/v1alpha1", "TenantControlPlane")
NS = "payments-web"
FLOW = {
    "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
    "kind": "FlowSchema",
    "metadata": {"name": "kiln-tenant-sa-writes", "labels": {"kiln.dev/request-id": "env_1"}},
    "spec": {
        "priorityLevelConfiguration": {"name": "x"},
        "distinguisherMethod": {"type": "ByUser"},
    },
}
FLOW_REF = AppliedRef("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "", "kiln-tenant-sa-writes")


def control_plane(*, token_file: bool = True) -> list[dict]:
    """A namespace, the audit ConfigMap and a TenantControlPlane mounting it and the token Secret."""
    webhook = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sink", "cluster": {"server": "https://kiln.test/hooks/x/env_1/"}}],
        "users": [{"name": "api", "user": {"tokenFile": "/etc/token/token"} if token_file else {}}],
        "contexts": [{"name": "sink", "context": {"cluster": "sink", "user": "api"}}],
        "current-context": "sink",
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "audit", "namespace": NS},
            "data": {"webhook.kubeconfig": yaml.safe_dump(webhook)},
        },
        {
            "apiVersion": TCP[0],
            "kind": TCP[1],
            "metadata": {"name": NS, "namespace": NS},
            "spec": {
                "controlPlane": {
                    "deployment": {
                        "extraArgs": {
                            "apiServer": [
                                "--audit-webhook-config-file=/etc/audit/webhook.kubeconfig"
                            ]
                        },
                        "additionalVolumes": [
                            {"name": "audit", "configMap": {"name": "audit"}},
                            {"name": "token", "secret": {"secretName": "sink-token"}},
                        ],
                        "additionalVolumeMounts": {
                            "apiServer": [
                                {"name": "audit", "mountPath": "/etc/audit"},
                                {"name": "token", "mountPath": "/etc/token"},
                            ]
                        },
                    }
                }
            },
        },
    ]


@pytest.fixture
def sent():
    """The batches the simulated tenant API servers send, instead of HTTP."""
    batches: list[tuple[str, str, dict]] = []
    previous = audit_transport()
    set_audit_transport(lambda url, token, body: batches.append((url, token, json.loads(body))))
    yield batches
    set_audit_transport(previous)


# --- kubernetes ---------------------------------------------------------------------------


@pytest.fixture
def kubes():
    host, tenant = FakeKube().start(), FakeKube().start()
    yield host, tenant
    host.stop()
    tenant.stop()


def k8s_backend(fake: FakeKube) -> KubernetesBackend:
    return KubernetesBackend(k8s.ApiClient(k8s.Configuration(host=fake.url)), timeout=5)


def test_kubernetes_writes_a_secret_by_server_side_apply_as_kiln(kubes):
    host, _ = kubes
    backend = k8s_backend(host)
    ref = backend.write_secret(
        namespace=NS, name="sink-token", data={"token": "s3cret"}, labels={"a": "b"}
    )
    assert ref == AppliedRef("v1", "Secret", NS, "sink-token", generation=1, uid=ref.uid)
    (patch,) = [r for r in host.requests if r["method"] == "PATCH"]
    assert patch["path"].startswith(f"/api/v1/namespaces/{NS}/secrets/sink-token?fieldManager=kiln")
    assert patch["content_type"] == "application/apply-patch+yaml"
    assert patch["body"]["data"] == {"token": base64.b64encode(b"s3cret").decode()}
    assert {r["user_agent"] for r in host.requests} == {USER_AGENT}
    assert secret_text(backend.get("v1", "Secret", NS, "sink-token"), "token") == "s3cret"


def test_kubernetes_reaches_the_tenant_api_server_with_kamajis_admin_kubeconfig(kubes):
    host, tenant = kubes
    backend = k8s_backend(host)
    assert backend.tenant(namespace=NS, name=NS) is None  # no control plane yet
    backend.apply(control_plane())
    assert backend.tenant(namespace=NS, name=NS) is None  # Kamaji has not written its kubeconfig
    host.tenant_url = tenant.url
    backend.apply(control_plane())  # the controller writes the admin kubeconfig Secret now
    inside = backend.tenant(namespace=NS, name=NS)
    assert isinstance(inside, KubernetesBackend)
    inside.apply([FLOW])
    key = ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "", "kiln-tenant-sa-writes")
    assert key in tenant.objects and key not in host.objects
    assert inside.get(*key) is not None and backend.get(*key) is None
    assert {r["user_agent"] for r in tenant.requests} == {USER_AGENT}
    assert inside.delete(FLOW_REF) is True


def test_kubernetes_reads_the_admin_kubeconfig_the_control_planes_status_names(kubes):
    host, tenant = kubes
    backend = k8s_backend(host)
    backend.apply(control_plane())
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "t", "cluster": {"server": tenant.url}}],
        "users": [{"name": "admin", "user": {"token": "x"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "admin"}}],
        "current-context": "t",
    }
    backend.write_secret(
        namespace=NS, name="elsewhere", data={"admin.conf": json.dumps(kubeconfig)}, labels={}
    )
    assert backend.tenant(namespace=NS, name=NS) is None  # not where Kamaji's default puts it
    status = {"kubeconfig": {"admin": {"secretName": "elsewhere"}}}
    assert backend.update_status([(AppliedRef(*TCP, NS, NS), status)]) == 1
    backend.tenant(namespace=NS, name=NS).apply([FLOW])
    assert ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "", FLOW_REF.name) in tenant.objects


def test_a_broken_admin_kubeconfig_is_a_clear_error_that_retrying_does_not_fix(kubes):
    host, _ = kubes
    backend = k8s_backend(host)
    backend.apply(control_plane())
    backend.write_secret(
        namespace=NS, name=f"{NS}-admin-kubeconfig", data={"admin.conf": "[: not yaml"}, labels={}
    )
    with pytest.raises(DeliveryError, match="admin kubeconfig of payments-web/payments-web") as err:
        backend.tenant(namespace=NS, name=NS)
    assert err.value.retryable is False


# --- simulated ----------------------------------------------------------------------------


def test_a_simulated_tenant_api_server_serves_once_its_control_plane_is_ready(settings):
    host = SimulatedBackend()
    assert host.tenant(namespace=NS, name=NS) is None
    settings.KILN_SIM_DELAY_PROFILE = "realistic"  # a control plane takes 20 s to come up
    host.apply(control_plane())
    assert host.tenant(namespace=NS, name=NS) is None
    SimulatedObject.objects.filter(kind=TCP[1]).update(ready_at=timezone.now())  # it came up
    assert host.tenant(namespace=NS, name=NS) is not None
    assert host.tenant(namespace=NS, name=NS).tenant(namespace=NS, name=NS) is None


def test_a_tenants_objects_are_apart_from_the_hosts_and_go_with_its_control_plane(sent):
    host = SimulatedBackend()
    host.apply(control_plane())
    inside = host.tenant(namespace=NS, name=NS)
    same_name = {**FLOW, "spec": {**FLOW["spec"], "matchingPrecedence": 1}}
    host.apply([same_name])  # the same key in the host cluster is another object
    inside.apply([FLOW])
    assert inside.get(*FLOW_REF.key)["spec"] == FLOW["spec"]
    assert host.get(*FLOW_REF.key)["spec"]["matchingPrecedence"] == 1
    assert [o["metadata"]["name"] for o in inside.list("v1", "ConfigMap", NS)] == []
    assert len(inside.list(*FLOW_REF.key[:2])) == 1
    host.delete(AppliedRef(*TCP, NS, NS))
    assert inside.get(*FLOW_REF.key) is None  # its datastore went with the control plane
    assert host.get(*FLOW_REF.key) is not None
    assert not SimulatedObject.objects.filter(cluster=f"{NS}/{NS}").exists()


def test_the_simulated_webhook_sends_with_the_token_of_the_mounted_secret(sent):
    host = SimulatedBackend()
    host.apply(control_plane())
    inside = host.tenant(namespace=NS, name=NS)
    inside.apply([FLOW])
    assert sent == [] and inside.audit.dropped  # no Secret yet: no credential, nothing sent
    host.write_secret(namespace=NS, name="sink-token", data={"token": "t-1\n"}, labels={})
    inside.apply([FLOW])
    inside.delete(FLOW_REF)
    inside.delete(FLOW_REF)  # gone: audited with its 404
    assert [(url, token) for url, token, _ in sent] == [
        ("https://kiln.test/hooks/x/env_1/", "t-1")
    ] * 3
    events = [b["items"][0] for _, _, b in sent]
    assert [(e["verb"], e["responseStatus"]["code"]) for e in events] == [
        ("patch", 200),
        ("delete", 200),
        ("delete", 404),
    ]
    assert events[0]["objectRef"] == {
        "apiGroup": "flowcontrol.apiserver.k8s.io",
        "apiVersion": "v1",
        "resource": "flowschemas",
        "name": "kiln-tenant-sa-writes",
    }
    assert events[0]["requestURI"] == (
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/kiln-tenant-sa-writes"
    )
    assert {e["userAgent"] for e in events} == {USER_AGENT}
    host.write_secret(namespace=NS, name="sink-token", data={"token": "t-2"}, labels={})
    inside.apply([FLOW])
    assert sent[-1][1] == "t-2"  # a new token is read at the next batch, as tokenFile is reread


def test_a_webhook_without_a_token_sends_nothing(sent):
    host = SimulatedBackend()
    host.apply(control_plane(token_file=False))
    host.write_secret(namespace=NS, name="sink-token", data={"token": "t"}, labels={})
    host.tenant(namespace=NS, name=NS).apply([FLOW])
    assert sent == []


def test_a_webhook_failure_never_fails_the_request_it_audits():
    host = SimulatedBackend()
    host.apply(control_plane())
    host.write_secret(namespace=NS, name="sink-token", data={"token": "t"}, labels={})

    def refuse(url, token, body):
        raise OSError("connection refused")

    previous = audit_transport()
    set_audit_transport(refuse)
    try:
        webhook = TenantAuditWebhook(host, NS, NS)
        inside = SimulatedBackend(f"{NS}/{NS}", audit=webhook)
        assert inside.apply([FLOW])[0].name == FLOW_REF.name
        assert webhook.dropped == ["connection refused"]
    finally:
        set_audit_transport(previous)


# --- gitops -------------------------------------------------------------------------------


def test_gitops_never_commits_a_secret(tmp_path):
    repo = tmp_path / "gitops.git"
    observer = SimulatedBackend()
    gitops = GitOpsBackend(str(repo), work_dir=tmp_path / "w", observer=observer)
    gitops.apply(control_plane())
    gitops.write_secret(namespace=NS, name="sink-token", data={"token": "t"}, labels={})
    assert secret_text(observer.get("v1", "Secret", NS, "sink-token"), "token") == "t"
    files = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "main"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert files and not any("secret" in f for f in files)
    assert gitops.tenant(namespace=NS, name=NS) is not None  # the observed cluster's


def test_gitops_without_an_observed_cluster_refuses_a_secret(tmp_path):
    gitops = GitOpsBackend(str(tmp_path / "g.git"), work_dir=tmp_path / "w", observer=None)
    with pytest.raises(DeliveryError, match="not committed to Git") as err:
        gitops.write_secret(namespace=NS, name="sink-token", data={"token": "t"}, labels={})
    assert err.value.retryable is False
    assert gitops.tenant(namespace=NS, name=NS) is None
