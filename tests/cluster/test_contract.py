"""The protocol's contract, run against every backend: simulated, kubernetes and gitops.

The kubernetes backend is the real `kubernetes` client talking to a real local
HTTP API server (`fake_kube.FakeKube`); gitops commits into a real bare
repository and applies each commit to a simulated cluster (its observer, standing
in for Argo CD). Each case states what every backend must do; where backends must
differ (who kills a pod, who keeps a Lease), the harness says what each one is.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from django.db import connection
from kubernetes import client as k8s

from kiln.cluster import AppliedRef, Conflict, DeliveryBackend, DeliveryError
from kiln.cluster.gitops import GitOpsBackend
from kiln.cluster.kubernetes import KubernetesBackend
from kiln.cluster.lease import KubernetesLease
from kiln.cluster.nodes import PodBinding, node_list, node_manifest, node_status, pod_list
from kiln.cluster.simulated import SimulatedBackend
from kiln.cluster.simulated_failures import inject_failure
from tests.cluster.fake_kube import FakeKube

pytestmark = pytest.mark.django_db

ISTIO = "networking.istio.io/v1"


@dataclass
class Harness:
    """One backend under test, and how to make one of its objects keep a finalizer forever."""

    backend: DeliveryBackend
    stick: Callable[[str], None]
    kills_pods_itself: bool  # the backend deletes a pod-kill's pods (no Chaos Mesh behind it)
    keeps_leases: bool  # lease_mirror returns a cluster-side Lease


@pytest.fixture(params=["simulated", "kubernetes", "gitops"])
def harness(request, tmp_path) -> Iterator[Harness]:
    if request.param == "simulated":
        yield Harness(
            SimulatedBackend(),
            lambda name: inject_failure("stuck_finalizer", name=name),
            kills_pods_itself=True,
            keeps_leases=False,
        )
    elif request.param == "kubernetes":
        fake = FakeKube().start()
        backend = KubernetesBackend(k8s.ApiClient(k8s.Configuration(host=fake.url)), timeout=5)
        try:
            yield Harness(backend, fake.stuck.add, kills_pods_itself=False, keeps_leases=True)
        finally:
            fake.stop()
    else:
        repo = tmp_path / "gitops.git"
        backend = GitOpsBackend(str(repo), work_dir=tmp_path / "work", observer=SimulatedBackend())
        yield Harness(
            backend,
            lambda name: inject_failure("stuck_finalizer", name=name),
            kills_pods_itself=False,
            keeps_leases=False,
        )


def namespace(name: str = "shop") -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def vs(name: str, hosts: list[str], labels: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": ISTIO,
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": "shop", "labels": labels or {}},
        "spec": {"hosts": hosts, "http": [{"route": [{"destination": {"host": hosts[0]}}]}]},
    }


def pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "checkout"}},
        "spec": {"containers": [{"name": "app", "image": "checkout:1"}]},
    }


def names(objects: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


def test_every_backend_implements_the_whole_protocol(harness):
    backend = harness.backend
    assert isinstance(backend, DeliveryBackend)
    assert isinstance(backend.syncs_gitops, bool)
    assert isinstance(backend.simulates_traffic, bool)
    assert isinstance(backend.simulates_scheduling, bool)


def test_list_selects_by_label_equality_inequality_and_existence(harness):
    backend = harness.backend
    backend.apply(
        [
            namespace(),
            vs("a", ["a"], {"tier": "web", "kiln.dev/chaos-experiment": "e1"}),
            vs("b", ["b"], {"tier": "web"}),
            vs("c", ["c"], {"tier": "db"}),
        ]
    )
    assert names(backend.list(ISTIO, "VirtualService", "shop", "tier=web")) == ["a", "b"]
    assert names(backend.list(ISTIO, "VirtualService", "shop", "tier!=web")) == ["c"]
    assert names(backend.list(ISTIO, "VirtualService", "shop", "kiln.dev/chaos-experiment")) == [
        "a"
    ]
    assert names(backend.list(ISTIO, "VirtualService", "shop", "!kiln.dev/chaos-experiment")) == [
        "b",
        "c",
    ]
    assert names(backend.list(ISTIO, "VirtualService", "other", "tier=web")) == []


def test_list_can_leave_deleting_objects_out(harness):
    backend = harness.backend
    harness.stick("going")
    backend.apply([namespace(), vs("going", ["going"]), vs("staying", ["staying"])])
    assert backend.delete(AppliedRef(ISTIO, "VirtualService", "shop", "going"))
    everything = backend.list(ISTIO, "VirtualService", "shop")
    assert names(everything) == ["going", "staying"]
    assert everything[0]["metadata"].get("deletionTimestamp")
    live = backend.list(ISTIO, "VirtualService", "shop", include_deleting=False)
    assert names(live) == ["staying"]


def test_list_by_routing_host_matches_every_spelling_of_the_host_and_nothing_else(harness):
    backend = harness.backend
    backend.apply(
        [
            namespace(),
            vs("short", ["checkout"]),
            vs("fqdn", ["Checkout.shop.svc.cluster.local"]),
            vs("two-hosts", ["cart", "checkout.shop"]),
            vs("other", ["cart"]),
            vs("prefix-only", ["checkoutx.shop"]),
        ]
    )
    routing = backend.list(ISTIO, "VirtualService", "shop", routing_host="checkout.shop.svc")
    # Any spelling of `checkout` starts with the label "checkout" followed by "." or nothing;
    # "checkoutx" does not, and "cart" alone does not.
    assert names(routing) == ["fqdn", "short", "two-hosts"]


def test_a_write_with_the_live_resource_version_succeeds_and_a_stale_one_is_a_conflict(harness):
    backend = harness.backend
    backend.apply([namespace(), vs("checkout", ["checkout"])])
    read = backend.get(ISTIO, "VirtualService", "shop", "checkout")
    version = read["metadata"]["resourceVersion"]
    changed = vs("checkout", ["checkout"], {"step": "1"})
    changed["metadata"]["resourceVersion"] = version
    backend.apply([changed])  # the precondition holds: the write goes through
    after = backend.get(ISTIO, "VirtualService", "shop", "checkout")
    assert after["metadata"]["labels"] == {"step": "1"}
    assert after["metadata"]["resourceVersion"] != version
    stale = vs("checkout", ["checkout"], {"step": "stale"})
    stale["metadata"]["resourceVersion"] = version  # what a writer read before the last write
    with pytest.raises(Conflict) as err:
        backend.apply([stale])
    assert isinstance(err.value, DeliveryError) and err.value.retryable
    assert err.value.extra["status"] == 409 and err.value.http_status == 409
    assert backend.get(ISTIO, "VirtualService", "shop", "checkout")["metadata"]["labels"] == {
        "step": "1"
    }


def test_a_precondition_on_an_object_that_does_not_exist_is_a_conflict(harness):
    backend = harness.backend
    backend.apply([namespace()])
    ghost = vs("ghost", ["ghost"])
    ghost["metadata"]["resourceVersion"] = "7"
    with pytest.raises(Conflict):
        backend.apply([ghost])
    assert backend.get(ISTIO, "VirtualService", "shop", "ghost") is None


def test_an_unconditional_write_still_replaces_whatever_is_there(harness):
    backend = harness.backend
    backend.apply([namespace(), vs("checkout", ["checkout"], {"v": "1"})])
    backend.apply([vs("checkout", ["checkout"], {"v": "2"})])
    assert backend.get(ISTIO, "VirtualService", "shop", "checkout")["metadata"]["labels"] == {
        "v": "2"
    }


def test_read_modify_write_inside_the_namespace_lock(harness):
    backend = harness.backend
    backend.apply([namespace(), vs("checkout", ["checkout"], {"n": "0"})])
    for n in range(1, 4):
        with backend.lock_namespace(namespace="shop"):
            live = backend.get(ISTIO, "VirtualService", "shop", "checkout")
            body = vs(
                "checkout", ["checkout"], {"n": str(int(live["metadata"]["labels"]["n"]) + 1)}
            )
            body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            backend.apply([body])
        assert backend.get(ISTIO, "VirtualService", "shop", "checkout")["metadata"]["labels"] == {
            "n": str(n)
        }


def test_health_many_answers_as_health_does_one_by_one(harness):
    backend = harness.backend
    refs = backend.apply([namespace(), vs("checkout", ["checkout"])])
    missing = AppliedRef(ISTIO, "VirtualService", "shop", "missing")
    many = backend.health_many([*refs, missing])
    assert many == [backend.health(r) for r in [*refs, missing]]
    assert many[-1].status == "Missing"
    assert backend.health_many([]) == []


KINDS = [("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("v1", "Pod"),
         (ISTIO, "VirtualService"), ("v1", "ConfigMap")]  # fmt: skip


def _object(api_version: str, kind: str, namespace_: str, name: str) -> dict:
    body = {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace_, "labels": {"app": name}}}  # fmt: skip
    if kind == "VirtualService":
        body["spec"] = {"hosts": [name]}
    elif kind == "Pod":
        body["spec"] = {"containers": [{"name": "app", "image": "app:1"}]}
    elif kind == "ConfigMap":
        body["data"] = {"k": name}
    else:
        body["spec"] = {"replicas": 1, "selector": {"matchLabels": {"app": name}}}
    return body


def _seen(objects: list[dict]) -> list[tuple[str, str, str, str, bool]]:
    return [
        (o["apiVersion"], o["kind"], o["metadata"]["namespace"], o["metadata"]["name"],
         bool(o["metadata"].get("deletionTimestamp")))
        for o in objects
    ]  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_list_kinds_answers_as_list_does_kind_by_kind(harness, seed):
    """Random objects of several kinds in two namespaces, some held deleting by a finalizer:
    for random choices and orders of kinds (some never created), one namespace's list_kinds is
    each kind's list one after the other."""
    rng = random.Random(seed)
    backend = harness.backend
    spaces = [f"w{seed}a", f"w{seed}b"]
    manifests, deleting = [namespace(n) for n in spaces], []
    for api_version, kind in KINDS[:-1]:  # ConfigMap: listed, never created
        for i in range(rng.randint(0, 4)):
            name = f"{kind.lower()}-{rng.randint(0, 99):02d}-{i}"
            manifests.append(_object(api_version, kind, rng.choice(spaces), name))
            if rng.random() < 0.3:
                deleting.append(manifests[-1])
                harness.stick(name)
    backend.apply(manifests)
    for m in deleting:
        meta = m["metadata"]
        assert backend.delete(AppliedRef(m["apiVersion"], m["kind"], meta["namespace"], meta["name"]))
    for _ in range(6):
        kinds = rng.sample(KINDS, rng.randint(1, len(KINDS)))
        space = rng.choice(spaces)
        one_by_one = [o for version, kind in kinds for o in backend.list(version, kind, space)]
        assert _seen(backend.list_kinds(kinds, space)) == _seen(one_by_one)
    assert backend.list_kinds([], spaces[0]) == []


def test_a_pod_kill_is_carried_out_by_whoever_runs_the_chaos_controller(harness):
    backend = harness.backend
    backend.apply([namespace(), pod("checkout-1"), pod("checkout-2")])
    deleted = backend.carry_out_pod_kill(namespace="shop", pods=["checkout-1"])
    live = names(backend.list("v1", "Pod", "shop", "app=checkout", include_deleting=False))
    if harness.kills_pods_itself:
        assert deleted == ["checkout-1"] and live == ["checkout-2"]
    else:  # Chaos Mesh in the cluster kills them: nothing is deleted here
        assert deleted == [] and live == ["checkout-1", "checkout-2"]
    # A pod that is already gone is not reported as deleted again.
    again = backend.carry_out_pod_kill(namespace="shop", pods=["checkout-1"])
    assert again == []


def test_a_status_write_replaces_the_status_and_skips_what_does_not_exist(harness):
    backend = harness.backend
    node = node_manifest(
        name="n1", instance_type="m6i.xlarge", zone="z1", capacity_type="spot", nodepool="p"
    )
    backend.apply([node])
    written = backend.update_status(
        [
            (AppliedRef("v1", "Node", "", "n1"), node_status(cpu=3.92, memory=2**34, gpu=0)),
            (AppliedRef("v1", "Node", "", "missing"), node_status(cpu=1, memory=1, gpu=0)),
        ]
    )
    assert written == 1
    [live] = node_list(backend, nodepool="p", capacity_type="spot")
    assert live["status"]["allocatable"] == {
        "cpu": "3920m",
        "memory": str(2**34),
        "nvidia.com/gpu": "0",
    }
    assert node_list(backend, capacity_type="on-demand") == []


def test_binding_a_pod_sets_its_node_and_annotations_once(harness):
    backend = harness.backend
    backend.apply([namespace(), pod("checkout-1")])
    bind = PodBinding("shop", "checkout-1", "n1", {"kiln.dev/score-explanation": "{}"})
    assert backend.bind_pods([bind, PodBinding("shop", "gone", "n1")]) == 1
    [live] = pod_list(backend, namespace="shop", node="n1")
    assert live["spec"]["nodeName"] == "n1"
    assert live["status"]["phase"] == "Running"
    assert live["metadata"]["annotations"]["kiln.dev/score-explanation"] == "{}"
    # A bound pod is not bound again (the API server answers 409): nothing changes.
    assert backend.bind_pods([PodBinding("shop", "checkout-1", "n2")]) == 0
    assert pod_list(backend, namespace="shop", node="n2") == []


def test_annotating_merges_the_keys_given_removes_nulls_and_keeps_the_others(harness):
    backend = harness.backend
    node = node_manifest(
        name="n1", instance_type="m6i.xlarge", zone="z1", capacity_type="spot", nodepool="p",
        annotations={"kiln.dev/empty-since": "2026-12-06T08:00:00Z"},
    )  # fmt: skip
    backend.apply([node])
    ref = AppliedRef("v1", "Node", "", "n1")
    before = backend.get("v1", "Node", None, "n1")["metadata"]["resourceVersion"]
    assert backend.annotate(ref, {"karpenter.sh/do-not-disrupt": "true", "kiln.dev/x": "1"})
    live = backend.get("v1", "Node", None, "n1")
    assert live["metadata"]["annotations"] == {
        "kiln.dev/empty-since": "2026-12-06T08:00:00Z",
        "karpenter.sh/do-not-disrupt": "true",
        "kiln.dev/x": "1",
    }
    assert live["metadata"]["resourceVersion"] != before
    assert backend.annotate(ref, {"karpenter.sh/do-not-disrupt": None, "kiln.dev/x": None})
    assert backend.get("v1", "Node", None, "n1")["metadata"]["annotations"] == {
        "kiln.dev/empty-since": "2026-12-06T08:00:00Z"
    }
    assert backend.annotate(AppliedRef("v1", "Node", "", "gone"), {"a": "b"}) is False


def test_scaling_sets_only_the_replicas_and_answers_what_they_were(harness):
    """Through the scale subresource: the rest of the spec stays as the team applied it, the
    answer is the count before (the API server's default of 1 when unset), None when gone."""
    backend = harness.backend
    template = {"spec": {"containers": [{"name": "web", "image": "web:1"}]}}
    backend.apply(
        [
            namespace(),
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"replicas": 3, "template": template},
            },
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "db", "namespace": "shop"},
                "spec": {"template": template},
            },
        ]
    )
    web = AppliedRef("apps/v1", "Deployment", "shop", "web")
    assert backend.scale(web, 0) == 3
    live = backend.get(*web.key)
    assert live["spec"]["replicas"] == 0 and live["spec"]["template"] == template
    assert backend.scale(web, 0) == 0  # again: nothing to change
    assert backend.scale(web, 3) == 0
    assert backend.get(*web.key)["spec"]["replicas"] == 3
    assert backend.scale(AppliedRef("apps/v1", "StatefulSet", "shop", "db"), 0) == 1
    assert backend.scale(AppliedRef("apps/v1", "Deployment", "shop", "gone"), 0) is None


def test_a_lease_mirror_exists_only_where_the_cluster_keeps_leases(harness):
    mirror = harness.backend.lease_mirror(namespace="kiln-chaos", name="kiln-chaos-1")
    if harness.keeps_leases:
        assert isinstance(mirror, KubernetesLease)
        assert (mirror.namespace, mirror.name) == ("kiln-chaos", "kiln-chaos-1")
    else:
        assert mirror is None


def test_gitops_commits_a_conditional_write_and_its_observer_checks_the_precondition(tmp_path):
    repo = tmp_path / "gitops.git"
    backend = GitOpsBackend(str(repo), work_dir=tmp_path / "work", observer=SimulatedBackend())
    backend.apply([namespace(), vs("checkout", ["checkout"])])
    live = backend.get(ISTIO, "VirtualService", "shop", "checkout")
    body = vs("checkout", ["checkout"], {"step": "1"})
    body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    backend.apply([body])
    committed = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "show",
            "main:environments/shop/platform/networking.istio.io_virtualservice_shop_checkout.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "resourceVersion" not in committed  # server-set: never committed as desired state
    assert "step: '1'" in committed


def _until_another_session_waits_on_a_lock(timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            # Inside a transaction the activity view is a snapshot: take a new one each time.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.01)


@pytest.mark.django_db(transaction=True)
def test_the_simulated_namespace_lock_holds_a_second_writer_until_the_first_is_done():
    backend = SimulatedBackend()
    backend.apply([namespace()])
    events: list[str] = []
    held = threading.Event()

    def first() -> None:
        try:
            with backend.lock_namespace(namespace="shop"):
                events.append("first in")
                held.set()
                _until_another_session_waits_on_a_lock()
                events.append("first out")
        finally:
            connection.close()

    def second() -> None:
        try:
            held.wait(5)
            with backend.lock_namespace(namespace="shop"):
                events.append("second in")
        finally:
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert events == ["first in", "first out", "second in"]


def test_describe_reports_each_object_in_order_with_health_sync_and_events(harness):
    backend = harness.backend
    backend.apply([namespace(), vs("front", ["front"])])
    refs = [
        AppliedRef(ISTIO, "VirtualService", "shop", "front"),
        AppliedRef("v1", "Namespace", "", "shop"),
    ]
    states = backend.describe(refs)
    assert [s.ref for s in states] == refs
    assert [s.sync.value for s in states] == ["Synced", "Synced"]
    assert all(s.health.status.value in ("Healthy", "Progressing") for s in states)
    assert all(s.events and s.events[0].reason for s in states)
    assert any(e.reason == "Created" for e in states[0].events)


def test_describe_of_an_object_deleted_from_the_cluster_is_out_of_sync_or_missing(harness):
    backend = harness.backend
    backend.apply([namespace(), vs("gone", ["gone"])])
    ref = AppliedRef(ISTIO, "VirtualService", "shop", "gone")
    live = backend.observer if isinstance(backend, GitOpsBackend) else backend
    live.delete(ref)
    deadline = time.monotonic() + 10
    while live.get(*ref.key) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    (state,) = backend.describe([ref])
    assert state.sync.value == "OutOfSync"
    assert state.events == ()


def test_describe_under_gitops_reports_drift_between_the_commit_and_the_cluster(tmp_path):
    backend = GitOpsBackend(
        str(tmp_path / "gitops.git"), work_dir=tmp_path / "work", observer=SimulatedBackend()
    )
    backend.apply([namespace(), vs("front", ["front"])])
    ref = AppliedRef(ISTIO, "VirtualService", "shop", "front")
    assert backend.describe([ref])[0].sync.value == "Synced"
    backend.observer.apply([vs("front", ["elsewhere"])])  # changed in the cluster, not in Git
    (state,) = backend.describe([ref])
    assert state.sync.value == "OutOfSync"
    assert "spec" in state.sync_message
