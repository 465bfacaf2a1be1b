# ruff: noqa: F811 - fixtures imported from tests/portal/conftest.py are requested by name
"""The RBAC deploy/ ships is enough for what each process does, and a missing rule says so.

deploy/overlays/minimal is rendered with `kubectl kustomize`; its ServiceAccounts, Roles,
ClusterRoles and bindings (plus the per-namespace RoleBindings of
deploy/base/rbac/target-namespace.example.yaml, for namespace `shop`) are loaded into the
simulated API server, which then authorizes every request as kube-apiserver's RBAC authorizer
does. Provisioning, teardown, traffic shifting, chaos injection and revert, the reaper's sweep
and node sync run through the real `kubernetes` client with the token of the ServiceAccount of
the process that does them in production: not one request may be refused.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml
from django.conf import settings as django_settings
from kubernetes import client as k8s

from canary import services as canary_services
from canary.chaos.models import ChaosInjection
from canary.chaos.reaper import chaos_reap
from canary.chaos.services import experiment_create, fault_inject, fault_lease_acquire, fault_revert
from canary.traffic import ISTIO_API
from kiln.cluster import DeliveryError
from kiln.cluster.kubernetes import KubernetesBackend
from kiln.cluster.lease import KubernetesLease
from kiln.cluster.nodes import node_manifest, node_status, pod_manifest
from kiln.identity.models import Team
from kiln.identity.permissions import ENGINEER, PLATFORM_ADMIN, Actor
from portal.models import Environment
from portal.services import (
    environment_request_submit,
    environment_teardown,
    environment_teardown_request,
)
from portal.services.sleep import sleep_environment, wake_environment
from scheduler import nodesync
from tests.chaos.test_chaos_support import abort_data
from tests.cluster.fake_kube import FakeKube
from tests.portal.conftest import (  # noqa: F401 - fixtures, requested by name
    chain_emptied_afterwards,
    drain_audit,
    people,
    portal_settings,
    request_data,
    teams,
)
from tests.support.kube_rbac import (
    Attributes,
    RBACAuthorizer,
    rbac_objects,
    service_account_identity,
)

ROOT = Path(django_settings.BASE_DIR)
RBAC = ROOT / "deploy" / "base" / "rbac"
TARGET_EXAMPLE = RBAC / "target-namespace.example.yaml"
NAMESPACE = "kiln"
ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
ENGINEER_ALICE = Actor("alice", roles=frozenset({ENGINEER}), teams=frozenset({"payments"}))
NO_CLUSTER_CALLS = ("kiln-beat", "kiln-audit-writer", "kiln-scheduler-extender", "kiln-migrate")


def _kustomize(path: Path) -> list[dict]:
    out = subprocess.run(  # noqa: S603 - fixed arguments
        ["kubectl", "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, f"kubectl kustomize {path}: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def rendered_rbac() -> list[dict]:
    """The RBAC objects the minimal overlay renders (deploy/base/rbac alone, in namespace kiln,
    where there is no overlay yet)."""
    minimal = ROOT / "deploy" / "overlays" / "minimal"
    if minimal.is_dir():
        return rbac_objects(_kustomize(minimal))
    objects = rbac_objects(_kustomize(RBAC))
    for obj in objects:
        if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            obj["metadata"].setdefault("namespace", NAMESPACE)
    return objects


@pytest.fixture(scope="module")
def rbac() -> list[dict]:
    objects = rendered_rbac()
    return objects + [d for d in yaml.safe_load_all(TARGET_EXAMPLE.read_text()) if d]


@pytest.fixture
def kube(rbac):
    fake = FakeKube().start()
    fake.rbac = RBACAuthorizer(rbac)
    yield fake
    fake.stop()


def _client(kube: FakeKube, token: str) -> KubernetesBackend:
    configuration = k8s.Configuration(host=kube.url)
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return KubernetesBackend(k8s.ApiClient(configuration), timeout=5)


def admin(kube: FakeKube) -> KubernetesBackend:
    """A cluster administrator's client (seeds what other controllers would have made)."""
    return _client(kube, kube.rbac.admin_token())


def run_as(kube: FakeKube, settings, tmp_path: Path, account: str) -> KubernetesBackend:
    """Configure Kiln's kubernetes backend with `account`'s token, as its pod would mount it."""
    token_file = tmp_path / f"{account}.token"
    token_file.write_text(kube.rbac.issue_token(NAMESPACE, account))
    settings.KILN_DELIVERY_BACKEND = "kubernetes"
    settings.KILN_KUBE_API_URL = kube.url
    settings.KILN_KUBE_TOKEN_FILE = str(token_file)
    settings.KILN_CHAOS_LEASE_NAMESPACE = NAMESPACE
    return KubernetesBackend.from_settings()


def seed_shop(kube: FakeKube) -> None:
    """Namespace `shop` of team payments with four `app=web` pods."""
    Team.objects.get_or_create(slug="payments", defaults={"name": "Payments"})
    admin(kube).apply(
        [{"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "shop", "labels": {"kiln.dev/team": "payments"}}}]
        + [{"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"web-{i}", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "web:1"}]}} for i in range(4)]
    )  # fmt: skip


def pod_kill_data() -> dict:
    """A pod-kill experiment on shop's `app=web` pods (a PodChaos)."""
    data = abort_data(name="kill web", fault="pod-kill", service="")
    for key in ("abort_http_status", "percent"):
        data.pop(key, None)
    return data


# --- what is rendered -------------------------------------------------------------------------


def _bound_roles(rbac: list[dict], account: str) -> list[dict]:
    names = {
        (b["roleRef"]["kind"], b["metadata"].get("namespace", ""), b["roleRef"]["name"])
        for b in rbac
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s.get("name") == account for s in b.get("subjects", []))
    }
    return [
        r for r in rbac
        if (r["kind"], r["metadata"].get("namespace", "") if r["kind"] == "Role" else "",
            r["metadata"]["name"]) in {(k, ns if k == "Role" else "", n) for k, ns, n in names}
    ]  # fmt: skip


def test_every_process_has_its_service_account_and_the_quiet_ones_no_rights(rbac):
    accounts = {o["metadata"]["name"] for o in rbac if o["kind"] == "ServiceAccount"}
    assert accounts >= {
        "kiln-web", "kiln-worker", "kiln-beat", "kiln-audit-writer",
        "kiln-scheduler-extender", "kiln-chaos-reaper", "kiln-migrate",
    }  # fmt: skip
    for account in NO_CLUSTER_CALLS:
        assert _bound_roles(rbac, account) == [], account
    assert all(
        o["metadata"].get("namespace") == NAMESPACE
        for o in rbac
        if o["kind"] in ("ServiceAccount", "Role") and o["metadata"].get("namespace") != "shop"
    )


def test_fault_and_routing_writes_are_never_granted_cluster_wide(rbac):
    """Chaos and traffic write VirtualServices and PodChaos only where a RoleBinding opens a
    namespace; a ClusterRoleBinding grants them read verbs at most."""
    cluster_bound = {b["roleRef"]["name"] for b in rbac if b["kind"] == "ClusterRoleBinding"}
    for role in rbac:
        if role["kind"] != "ClusterRole" or role["metadata"]["name"] not in cluster_bound:
            continue
        for rule in role.get("rules") or []:
            if {"networking.istio.io", "chaos-mesh.org"} & set(rule.get("apiGroups", [])):
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, role["metadata"]["name"]


# --- the authorizer itself ----------------------------------------------------------------------


def test_a_role_binding_grants_in_its_namespace_only_and_resource_names_narrow(rbac):
    authorizer = RBACAuthorizer(rbac)
    worker = service_account_identity(NAMESPACE, "kiln-worker")
    reaper = service_account_identity(NAMESPACE, "kiln-chaos-reaper")
    vs = {"api_group": "networking.istio.io", "resource": "virtualservices"}
    assert authorizer.allows(worker, Attributes("patch", namespace="shop", name="x", **vs))
    assert not authorizer.allows(worker, Attributes("patch", namespace="lab", name="x", **vs))
    assert authorizer.allows(reaper, Attributes("list", **vs))  # the sweep: every namespace
    assert not authorizer.allows(reaper, Attributes("delete", namespace="lab", name="x", **vs))
    bind = {"api_group": "rbac.authorization.k8s.io", "resource": "clusterroles"}
    assert authorizer.allows(worker, Attributes("bind", name="edit", **bind))
    assert not authorizer.allows(worker, Attributes("bind", name="cluster-admin", **bind))
    lease = {"api_group": "coordination.k8s.io", "resource": "leases", "name": "l"}
    assert authorizer.allows(reaper, Attributes("update", namespace=NAMESPACE, **lease))
    assert not authorizer.allows(reaper, Attributes("update", namespace="shop", **lease))
    pods = {"api_group": "", "resource": "pods", "namespace": "shop", "name": "web-0"}
    assert authorizer.allows(worker, Attributes("get", **pods))
    assert not authorizer.allows(worker, Attributes("create", subresource="binding", **pods))


# --- the processes' calls under their own ServiceAccount ---------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("chain_emptied_afterwards")
def test_provisioning_and_teardown_as_kiln_worker(
    kube, people, settings, tmp_path, django_capture_on_commit_callbacks
):
    run_as(kube, settings, tmp_path, "kiln-worker")
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"], data=request_data(spot_node_pool=True, database=True)
        )
    env.refresh_from_db()
    assert env.status == "READY", env.status_reason
    kinds = {key[1] for key in kube.objects}
    assert {"Namespace", "RoleBinding", "NodePool", "PostgreSQLInstance", "Application"} <= kinds
    environment_teardown_request(actor=people["alice"], environment=env)
    deadline, result = time.monotonic() + 20, "pending"
    while result == "pending" and time.monotonic() < deadline:
        result = environment_teardown(environment_id=env.pk)
        drain_audit()
        time.sleep(0.05)
    assert result == "deleted"
    assert kube.objects == {}
    assert kube.denied == []
    assert len(kube.requests) > 20  # every one of them authorized as kiln-worker


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("chain_emptied_afterwards")
def test_sleep_and_wake_as_kiln_worker_scale_only_through_the_scale_subresource(
    kube, people, settings, tmp_path, django_capture_on_commit_callbacks
):
    """Sleeping scales the team's Deployment to zero and the NodePool's limits to zero, waking
    brings both back as they were: every request authorized as kiln-worker, and the only write
    to the team's workload is a patch of its `scale` subresource."""
    run_as(kube, settings, tmp_path, "kiln-worker")
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"], data=request_data(spot_node_pool=True)
        )
    env.refresh_from_db()
    assert env.status == "READY", env.status_reason
    web = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": env.namespace},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "w"}]}}},
    }
    admin(kube).apply([web], field_manager="kubectl")
    seeded = len(kube.requests)
    pool = next(m for m in env.manifests if m["kind"] == "NodePool")
    pool_key = ("karpenter.sh/v1", "NodePool", "", pool["metadata"]["name"])
    web_key = ("apps/v1", "Deployment", env.namespace, "web")
    with django_capture_on_commit_callbacks(execute=True):
        sleep_environment(env, actor=people["alice"])
    env.refresh_from_db()
    assert env.status == "SLEEPING" and env.slept_at is not None, env.status_reason
    assert kube.objects[web_key]["spec"]["replicas"] == 0
    assert kube.objects[pool_key]["spec"]["limits"] == {"cpu": "0", "memory": "0Gi"}
    with django_capture_on_commit_callbacks(execute=True):
        wake_environment(env, actor=people["alice"])
    env.refresh_from_db()
    assert env.status == "READY", env.status_reason
    assert kube.objects[web_key]["spec"]["replicas"] == 3
    assert kube.objects[pool_key]["spec"]["limits"] == pool["spec"]["limits"]
    writes = [
        r["path"].split("?")[0]
        for r in kube.requests[seeded:]
        if r["method"] == "PATCH" and "/deployments/web" in r["path"]
    ]
    assert writes and all(p.endswith("/deployments/web/scale") for p in writes)
    assert kube.denied == []


@pytest.mark.django_db
def test_traffic_shifting_as_kiln_worker_in_an_opened_namespace(kube, settings, tmp_path):
    seed_shop(kube)
    worker = run_as(kube, settings, tmp_path, "kiln-worker")
    service = canary_services.service_create(
        actor=ADMIN, team=Team.objects.get(slug="payments"), name="checkout", namespace="shop",
        sim_traffic_class="steady",
    )  # fmt: skip
    rollout = canary_services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", ticks_per_step=3
    )
    assert canary_services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    live = worker.get(ISTIO_API, "VirtualService", "shop", "checkout")
    assert live is not None and live["spec"]["http"][0]["route"]
    assert worker.get(ISTIO_API, "DestinationRule", "shop", "checkout") is not None
    assert kube.denied == []


@pytest.mark.django_db
def test_chaos_injection_revert_and_sweep_as_worker_and_reaper(kube, settings, tmp_path):
    seed_shop(kube)
    worker = run_as(kube, settings, tmp_path, "kiln-worker")
    injected = []
    # Both faults on the same web pods, one of each object kind the roles must allow: each
    # experiment says it may overlap the other, as two experiments on one target must.
    for data in (abort_data(may_overlap=True), {**pod_kill_data(), "may_overlap": True}):
        exp = experiment_create(actor=ENGINEER_ALICE, data=data, backend=worker)
        term = fault_lease_acquire(experiment_id=exp.pk, holder="controller-1")
        assert term is not None
        injected.append(
            fault_inject(experiment_id=exp.pk, holder="controller-1", term=term, backend=worker)
        )
    assert {k[1] for k in kube.objects if k[2] == "shop"} >= {"VirtualService", "PodChaos"}
    assert any(k[1] == "Lease" and k[2] == NAMESPACE for k in kube.objects)
    reaper = run_as(kube, settings, tmp_path, "kiln-chaos-reaper")
    assert fault_revert(injection_id=injected[0].pk, actor=ADMIN, reason="done", backend=reaper)
    # The second one's row is lost (a crashed controller): the reaper's sweep finds its object.
    ChaosInjection.objects.filter(pk=injected[1].pk).update(reverted_at="2026-01-01T00:00:00Z")
    chaos_reap(backend=reaper)
    assert not [k for k in kube.objects if k[1] in ("VirtualService", "PodChaos")]
    assert kube.denied == []


@pytest.mark.django_db
def test_node_sync_as_kiln_worker(kube, settings, tmp_path):
    seeder = admin(kube)
    nodes = seeder.apply(
        [
            node_manifest(
                name=f"node-{i}", instance_type="m5.large", zone="eu-west-1a",
                capacity_type="on-demand", nodepool="default",
            )
            for i in range(2)
        ]
    )  # fmt: skip
    seeder.update_status([(ref, node_status(cpu=2, memory=8 * 2**30, gpu=0)) for ref in nodes])
    seeder.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}]
        + [
            pod_manifest(
                namespace="shop", name="web-0", owner_kind="ReplicaSet", owner_name="web-1",
                owner_uid="u-1", template={"spec": {"containers": [{"name": "web"}]}},
            )
        ]
    )  # fmt: skip
    worker = run_as(kube, settings, tmp_path, "kiln-worker")
    synced = nodesync.cluster_sync(backend=worker)
    assert len(synced.result.created) == 2
    assert kube.denied == []


# --- a missing rule -----------------------------------------------------------------------------


def _drop_rule(kube: FakeKube, kind: str, name: str, group: str, resource: str, namespace=""):
    roles = kube.rbac.roles[(kind, namespace, name)]
    index = next(
        i for i, r in enumerate(roles)
        if group in r.get("apiGroups", []) and resource in r.get("resources", [])
    )  # fmt: skip
    return kube.rbac.remove_rule(kind, name, index, namespace)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("chain_emptied_afterwards")
def test_without_its_network_policy_rule_provisioning_fails_naming_verb_and_resource(
    kube, people, settings, tmp_path, django_capture_on_commit_callbacks
):
    _drop_rule(kube, "ClusterRole", "kiln-delivery", "networking.k8s.io", "networkpolicies")
    run_as(kube, settings, tmp_path, "kiln-worker")
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    env = Environment.objects.get(pk=env.pk)
    assert env.status == "FAILED"
    assert (
        'User "system:serviceaccount:kiln:kiln-worker" cannot patch resource "networkpolicies" '
        'in API group "networking.k8s.io" in the namespace "payments-checkout"'
    ) in env.status_reason
    assert "HTTP 403" in env.status_reason and "Traceback" not in env.status_reason
    assert [(a.verb, a.resource) for a in kube.denied] == [("patch", "networkpolicies")]


def test_without_the_lease_rule_the_lease_write_is_a_delivery_error(kube, settings, tmp_path):
    _drop_rule(kube, "Role", "kiln-chaos-leases", "coordination.k8s.io", "leases", NAMESPACE)
    worker = run_as(kube, settings, tmp_path, "kiln-worker")
    lease = KubernetesLease(worker.api, NAMESPACE, "kiln-chaos-x")
    with pytest.raises(DeliveryError) as err:
        lease.read()
    assert not err.value.retryable
    assert str(err.value) == (
        'read Lease kiln/kiln-chaos-x: HTTP 403 leases "kiln-chaos-x" is forbidden: User '
        '"system:serviceaccount:kiln:kiln-worker" cannot get resource "leases" in API group '
        '"coordination.k8s.io" in the namespace "kiln"'
    )
