"""Kubernetes backend: the real `kubernetes` client against a real local HTTP API server."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from kiln.cluster import AppliedRef, DeliveryError, HealthStatus
from kiln.cluster.kubernetes import KubernetesBackend
from portal import compose as c
from tests.cluster.fake_kube import FakeKube


@pytest.fixture
def kube():
    fake = FakeKube().start()
    yield fake
    fake.stop()


def backend_for(fake: FakeKube) -> KubernetesBackend:
    return KubernetesBackend(k8s.ApiClient(k8s.Configuration(host=fake.url)), timeout=5)


SPEC = c.EnvironmentSpec(
    request_id="env_k8s",
    team="payments",
    name="web",
    namespace="payments-web",
    env_class="dev",
    ttl_hours=24,
    workload_class="batch",
    cpu=4,
    memory_gib=8,
    tenant_control_plane=True,
    spot_node_pool=True,
    database=True,
    datastore="etcd-a1",
)


def test_server_side_apply_with_field_manager_kiln(kube):
    backend = backend_for(kube)
    manifests = c.compose(SPEC)
    refs = backend.apply(manifests)
    patches = [r for r in kube.requests if r["method"] == "PATCH"]
    assert len(patches) == len(manifests)
    assert all(r["content_type"] == "application/apply-patch+yaml" for r in patches)
    assert all("fieldManager=kiln" in r["path"] and "force=true" in r["path"] for r in patches)
    assert patches[0]["path"] == "/api/v1/namespaces/payments-web?fieldManager=kiln&force=true"
    assert any(
        r["path"].startswith("/apis/karpenter.sh/v1/nodepools/") for r in patches
    )  # cluster-scoped
    live = backend.get("v1", "ResourceQuota", "payments-web", "kiln-quota")
    assert live["metadata"]["managedFields"][0]["manager"] == "kiln"
    assert live["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"
    assert refs[0].uid and refs[0].generation == 1
    again = backend.apply(manifests)
    assert [r.generation for r in again] == [r.generation for r in refs]


def test_get_list_delete_and_health(kube):
    backend = backend_for(kube)
    backend.apply(c.compose(SPEC))
    ref = AppliedRef("networking.k8s.io/v1", "NetworkPolicy", "payments-web", "default-deny")
    assert backend.health(ref).status == HealthStatus.HEALTHY
    listed = backend.list(
        "networking.k8s.io/v1", "NetworkPolicy", "payments-web", "kiln.dev/team=payments"
    )
    assert [o["metadata"]["name"] for o in listed] == ["allow-dns-egress", "default-deny"]
    assert backend.list("apps/v1", "Deployment", "payments-web") == []
    assert backend.delete(ref) is True
    assert backend.get(*ref.key) is None
    assert backend.delete(ref) is False
    assert backend.health(ref).status == HealthStatus.MISSING


def test_readiness_by_watch(kube):
    kube.ready_after = 1.0
    backend = backend_for(kube)
    [ref] = backend.apply([c.namespace(SPEC)])
    assert backend.health(ref).status == HealthStatus.PROGRESSING
    assert backend.wait_ready(ref, timeout=5).status == HealthStatus.HEALTHY
    assert any("watch=true" in r["path"] for r in kube.requests)


def test_never_ready_times_out_and_stuck_finalizer_stays_deleting(kube):
    kube.never_ready.add("payments-web")
    kube.stuck.add("payments-web")
    backend = backend_for(kube)
    [ref] = backend.apply([c.namespace(SPEC)])
    assert backend.wait_ready(ref, timeout=1).status == HealthStatus.PROGRESSING
    backend.delete(ref)
    assert backend.health(ref).status == HealthStatus.DELETING
    with pytest.raises(DeliveryError) as err:
        backend.apply([c.namespace(SPEC)])
    assert err.value.retryable  # 409 while deleting


def test_unknown_kinds_and_unreachable_servers_are_delivery_errors(kube):
    backend = backend_for(kube)
    with pytest.raises(DeliveryError) as err:
        backend.apply(
            [{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}]
        )
    assert not err.value.retryable
    down = KubernetesBackend(k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9")), timeout=1)
    with pytest.raises(DeliveryError) as err:
        down.get("v1", "Namespace", None, "x")
    assert err.value.retryable
