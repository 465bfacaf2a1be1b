# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""Verified reverts: every revert is read back through the cluster; one the cluster keeps (a
finalizer holding the object) or that cannot be read back is retried, then marked for a person
with the evidence, counted, on the attention list, and confirmed later by a person or the reaper.
On the simulated cluster and, with the real `kubernetes` client, on the stand-in API server."""

from __future__ import annotations

import kubernetes.client as k8s
import pytest
from prometheus_client import REGISTRY

from audit.models import OutboxEvent
from canary.chaos import kinds
from canary.chaos.models import ChaosInjection, InjectionState
from canary.chaos.reaper import FaultsUnconfirmedCollector, chaos_reap
from canary.chaos.services import experiment_create, fault_inject, fault_lease_acquire
from canary.chaos.services.injection import fault_revert, fault_revert_recheck
from kiln import attention
from kiln.cluster import AppliedRef
from kiln.cluster.kubernetes import KubernetesBackend
from kiln.cluster.simulated_failures import inject_failure
from kiln.identity.permissions import system_actor
from tests.chaos.test_chaos_kinds import data_for
from tests.chaos.test_chaos_support import (  # noqa: F401
    admin,
    backend,
    chaos_settings,
    engineer,
    shop,
    signed_in_engineer,
)
from tests.cluster.fake_kube import FakeKube
from tests.support.kube_sim import HELD_FINALIZER

pytestmark = pytest.mark.django_db

REAPER = system_actor("chaos-reaper")


@pytest.fixture
def quick_retries(chaos_settings):
    chaos_settings.KILN_CHAOS_REVERT_ATTEMPTS = 3
    chaos_settings.KILN_CHAOS_REVERT_RETRY_SECONDS = 0.01
    return chaos_settings


def _inject(actor, backend, fault: str, **over) -> ChaosInjection:
    exp = experiment_create(
        actor=actor, data=data_for(fault, may_overlap=True, **over), backend=backend
    )
    term = fault_lease_acquire(experiment_id=exp.pk, holder="controller-a")
    return fault_inject(experiment_id=exp.pk, holder="controller-a", term=term, backend=backend)


def _reverted_events() -> list[dict]:
    return [
        e.data for e in OutboxEvent.objects.filter(action="chaos.fault.reverted").order_by("id")
    ]


def _unconfirmed_counter(fault: str) -> float:
    value = REGISTRY.get_sample_value("kiln_chaos_reverts_unconfirmed_total", {"fault": fault})
    return value or 0.0


def _gauge() -> float:
    (family,) = list(FaultsUnconfirmedCollector().collect())
    return family.samples[0].value


@pytest.mark.parametrize("fault", sorted(kinds.KINDS), ids=sorted(kinds.KINDS))
def test_every_kind_is_applied_and_its_revert_confirmed_by_reading_it_back(
    quick_retries, engineer, shop, backend, fault
):
    injection = _inject(engineer, backend, fault)
    (ref,) = injection.applied
    assert ref["kind"] == kinds.KINDS[fault].object_kind
    live = backend.get(ref["apiVersion"], ref["kind"], "shop", ref["name"])
    # The blast radius asked (2 pods, 25% of 4 = 1) and the kind's cap: one pod, by name.
    assert live["spec"]["selector"] == {"pods": {"shop": injection.targets}}
    assert len(injection.targets) == 1
    assert live["spec"]["duration"] == "300s"

    assert fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=backend)
    injection.refresh_from_db()
    assert injection.state == InjectionState.REVERTED
    assert (injection.revert_confirmed, injection.revert_attempts) == (True, 1)
    assert injection.revert_evidence == [] and injection.confirmed_at is not None
    assert backend.get(ref["apiVersion"], ref["kind"], "shop", ref["name"]) is None
    (event,) = _reverted_events()
    assert event["confirmed"] is True and event["attempts"] == 1


def test_an_http_fault_revert_is_confirmed_too(quick_retries, engineer, shop, backend):
    exp = experiment_create(
        actor=engineer,
        data={
            **{k: v for k, v in data_for("network-delay").items() if k != "latency_ms"},
            "fault": "http-abort",
            "service": "web",
            "abort_http_status": 503,
            "jitter_ms": None,
        },
        backend=backend,
    )
    term = fault_lease_acquire(experiment_id=exp.pk, holder="controller-a")
    injection = fault_inject(
        experiment_id=exp.pk, holder="controller-a", term=term, backend=backend
    )
    assert fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=backend)
    injection.refresh_from_db()
    assert injection.revert_confirmed is True and injection.state == InjectionState.REVERTED


def test_a_fault_the_cluster_keeps_is_retried_then_marked_for_a_person_until_it_goes(
    quick_retries, engineer, shop, backend
):
    # A finalizer nobody removes holds the NetworkChaos after its delete.
    inject_failure("stuck_finalizer", kind="NetworkChaos")
    injection = _inject(engineer, backend, "network-partition")
    (ref,) = injection.applied
    before = _unconfirmed_counter("network-partition")

    assert fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=backend)
    injection.refresh_from_db()
    assert injection.state == InjectionState.UNCONFIRMED
    assert (injection.revert_confirmed, injection.revert_attempts) == (False, 3)
    (evidence,) = injection.revert_evidence
    assert evidence["object"] == f"NetworkChaos shop/{ref['name']}"
    assert "held by finalizers" in evidence["found"] and "simulated-stuck" in evidence["found"]
    (event,) = _reverted_events()
    assert event["confirmed"] is False and event["attempts"] == 3
    assert event["evidence"] == injection.revert_evidence
    assert _unconfirmed_counter("network-partition") == before + 1
    assert _gauge() == 1.0
    # No longer live: the controller does not loop on it, nobody injects over it.
    assert injection.reverted_at is not None

    # On the attention list of the team's engineers, naming what was found.
    items = [i for i in attention.collect(engineer) if i.key.startswith("chaos.unconfirmed:")]
    assert len(items) == 1 and "still" in items[0].title and ref["name"] in items[0].detail

    # The reaper's pass reverts and reads it again: still held, still unconfirmed.
    assert chaos_reap(backend=backend).confirmed == []
    injection.refresh_from_db()
    assert injection.state == InjectionState.UNCONFIRMED

    # Someone removes the finalizer by hand; the next pass confirms it, audited.
    backend.clear_finalizers(AppliedRef.from_dict(ref))
    assert chaos_reap(backend=backend).confirmed == [injection.pk]
    injection.refresh_from_db()
    assert injection.state == InjectionState.REVERTED and injection.revert_confirmed is True
    confirmed = OutboxEvent.objects.get(action="chaos.fault.revert_confirmed")
    assert confirmed.data["evidence_before"] and confirmed.actor == "system:chaos-reaper"
    assert _gauge() == 0.0
    assert not [i for i in attention.collect(engineer) if i.key.startswith("chaos.unconfirmed:")]


class UnreadableCluster:
    """The simulated cluster, except that every read of a fault object fails (the API server
    answering errors to the reaper's reads)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def get(self, api_version, kind, namespace, name):
        if api_version.startswith("chaos-mesh.org/"):
            raise ConnectionError("the API server did not answer")
        return self.inner.get(api_version, kind, namespace, name)


def test_a_fault_held_briefly_by_a_finalizer_is_confirmed_once_it_goes_without_a_second_write(
    chaos_settings, engineer, shop, backend
):
    # Chaos Mesh's finalizer holds the deleted NetworkChaos for 0.2 s. The read-back polls
    # within the first pause (1 s) and confirms it then: one write, not a second a pause later.
    chaos_settings.KILN_CHAOS_REVERT_ATTEMPTS = 3
    chaos_settings.KILN_CHAOS_REVERT_RETRY_SECONDS = 1.0
    injection = _inject(engineer, backend, "network-delay")
    (ref,) = injection.applied
    live = backend.get(ref["apiVersion"], ref["kind"], "shop", ref["name"])
    meta = live["metadata"]
    held = {
        "apiVersion": live["apiVersion"],
        "kind": live["kind"],
        "metadata": {
            "name": meta["name"],
            "namespace": "shop",
            "labels": meta.get("labels") or {},
            "finalizers": ["chaos-mesh/records"],
        },
        "spec": live["spec"],
    }
    backend.apply([held], field_manager="kiln")
    chaos_settings.KILN_SIM_DELAY_PROFILE = "fast"
    chaos_settings.KILN_SIM_FINALIZER_SECONDS = 0.2

    assert fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=backend)
    injection.refresh_from_db()
    assert injection.state == InjectionState.REVERTED
    assert (injection.revert_confirmed, injection.revert_attempts) == (True, 1)
    assert backend.get(ref["apiVersion"], ref["kind"], "shop", ref["name"]) is None


def test_a_read_back_that_fails_confirms_nothing(quick_retries, engineer, shop, backend):
    injection = _inject(engineer, backend, "clock-skew")
    assert fault_revert(
        injection_id=injection.pk,
        actor=REAPER,
        reason="test",
        backend=UnreadableCluster(backend),
    )
    injection.refresh_from_db()
    assert injection.state == InjectionState.UNCONFIRMED
    assert injection.revert_evidence[0]["found"] == "could not be read back"
    assert "did not answer" in injection.revert_evidence[0]["error"]
    # The delete itself went through: a person's recheck (through a cluster that answers) confirms.
    assert fault_revert_recheck(injection_id=injection.pk, actor=engineer, backend=backend)
    injection.refresh_from_db()
    assert injection.state == InjectionState.REVERTED


def test_a_person_rechecks_through_the_api(quick_retries, api_client_for, engineer, shop, backend):
    inject_failure("stuck_finalizer", kind="StressChaos")
    injection = _inject(engineer, backend, "cpu-stress")
    fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=backend)
    url = f"/api/v1/chaos/experiments/{injection.experiment_id}/injections/{injection.pk}/recheck/"
    client = api_client_for("engineer", sub="alice", team="payments")
    body = client.post(url).json()
    assert body["confirmed"] is False and body["state"] == "unconfirmed"
    assert "held by finalizers" in body["evidence"][0]["found"]
    detail = client.get(f"/api/v1/chaos/experiments/{injection.experiment_id}/").json()
    assert detail["injections"][0]["revert_confirmed"] is False

    backend.clear_finalizers(AppliedRef.from_dict(injection.applied[0]))
    body = client.post(url).json()
    assert body == {
        "id": injection.pk,
        "state": "reverted",
        "confirmed": True,
        "revert_confirmed": True,
        "evidence": [],
    }
    # Another team's engineer does not see it (404), and a confirmed one is not rechecked (409).
    other = api_client_for("engineer", sub="sam", team="search")
    assert other.post(url).status_code == 404
    assert client.post(url).status_code == 409


@pytest.fixture
def kube():
    fake = FakeKube().start()
    yield fake
    if not getattr(fake, "stopped", False):
        fake.stop()


def test_on_kubernetes_with_the_real_client(quick_retries, engineer, shop, kube):
    """Every kind through the kubernetes backend; a finalizer keeps one; then reads fail."""
    api = KubernetesBackend(k8s.ApiClient(k8s.Configuration(host=kube.url)), timeout=5)
    api.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "shop", "labels": {"kiln.dev/team": "payments"}},
            }
        ]
        + [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{i}", "namespace": "shop", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]},
            }
            for i in range(4)
        ]
    )
    for fault in sorted(kinds.KINDS):
        injection = _inject(engineer, api, fault, name=f"k8s {fault}")
        (ref,) = injection.applied
        key = (ref["apiVersion"], ref["kind"], "shop", ref["name"])
        assert key in kube.objects, fault
        assert fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=api)
        injection.refresh_from_db()
        assert injection.revert_confirmed is True and key not in kube.objects, fault

    # The API server keeps a deleted object behind a finalizer: unconfirmed, with what it showed.
    injection = _inject(engineer, api, "network-loss", name="held")
    (ref,) = injection.applied
    kube.stuck.add(ref["name"])
    fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=api)
    injection.refresh_from_db()
    assert injection.state == InjectionState.UNCONFIRMED
    assert HELD_FINALIZER in injection.revert_evidence[0]["found"]

    # The API server goes away: a read-back that fails confirms nothing either.
    injection = _inject(engineer, api, "dns-error", name="unread")
    kube.stop()
    kube.stopped = True
    fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=api)
    injection.refresh_from_db()
    assert injection.state == InjectionState.UNCONFIRMED
    assert {e["found"] for e in injection.revert_evidence} <= {
        "could not be read back",
        "the revert's write failed",
    }


def test_the_experiment_page_shows_the_evidence_and_rechecks(
    quick_retries, client, engineer, shop, backend, django_user_model
):
    inject_failure("stuck_finalizer", kind="TimeChaos")
    injection = _inject(engineer, backend, "clock-skew")
    fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=backend)
    signed_in_engineer(client, django_user_model)
    page = client.get(f"/chaos/{injection.experiment_id}/").content.decode()
    assert "still there" in page and "held by finalizers kiln.dev/simulated-stuck" in page
    assert "clock behind by 120 s" in page  # the magnitude, in words
    assert "Revert and read back again" in page

    recheck = f"/chaos/{injection.experiment_id}/injections/{injection.pk}/recheck/"
    backend.clear_finalizers(AppliedRef.from_dict(injection.applied[0]))
    assert client.post(recheck, {"note": "removed the finalizer\x00 by hand"}).status_code == 302
    injection.refresh_from_db()
    assert injection.state == InjectionState.REVERTED
    confirmed = OutboxEvent.objects.get(action="chaos.fault.revert_confirmed")
    assert confirmed.data["note"] == "removed the finalizer by hand" and confirmed.actor == "alice"
    page = client.get(f"/chaos/{injection.experiment_id}/").content.decode()
    assert "the fault is gone" in page and "still there" not in page


def test_through_gitops_the_revert_is_read_back_from_the_cluster(
    quick_retries, engineer, shop, tmp_path
):
    """GitOps commits the fault and its removal; the read-back asks the cluster (the observer),
    not the repository, so a fault the cluster keeps is not confirmed by a clean commit."""
    from kiln.cluster.gitops import GitOpsBackend
    from kiln.cluster.simulated import SimulatedBackend

    gitops = GitOpsBackend(
        str(tmp_path / "gitops.git"), work_dir=tmp_path / "work", observer=SimulatedBackend()
    )
    injection = _inject(engineer, gitops, "memory-stress", name="git")
    (ref,) = injection.applied
    assert gitops.desired(AppliedRef.from_dict(ref)) is not None  # committed
    assert fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=gitops)
    injection.refresh_from_db()
    assert injection.revert_confirmed is True
    assert gitops.desired(AppliedRef.from_dict(ref)) is None

    inject_failure("stuck_finalizer", kind="StressChaos")
    injection = _inject(engineer, gitops, "memory-stress", name="git held")
    fault_revert(injection_id=injection.pk, actor=REAPER, reason="test", backend=gitops)
    injection.refresh_from_db()
    assert injection.state == InjectionState.UNCONFIRMED
    assert "simulated-stuck" in injection.revert_evidence[0]["found"]
    assert gitops.desired(AppliedRef.from_dict(injection.applied[0])) is None  # the commit is clean


class WritesIgnored:
    """A cluster that answers every write of a VirtualService as done and keeps the old object
    (a mesh control plane that drops the edit): the route still carries the fault."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def apply(self, manifests, *, field_manager="kiln"):
        kept = [m for m in manifests if m.get("kind") != "VirtualService"]
        refs = self.inner.apply(kept, field_manager=field_manager) if kept else []
        return refs + [
            AppliedRef.from_dict({**m["metadata"], **m}) for m in manifests if m not in kept
        ]


def test_a_fault_merged_into_a_rollout_route_is_confirmed_only_once_the_route_is_clean(
    quick_retries, engineer, shop, backend
):
    from canary import services as canary_services
    from kiln.identity.models import Team
    from tests.chaos.test_chaos_merge import ADMIN, _rollout_vs, _start

    service = canary_services.service_create(
        actor=ADMIN,
        team=Team.objects.get(slug="payments"),
        name="checkout",
        namespace="shop",
        sim_traffic_class="steady",
    )
    rollout = canary_services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", ticks_per_step=3
    )
    assert canary_services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    exp, injection = _start(engineer, backend)
    assert injection.applied[0]["merged"] is True

    fault_revert(
        injection_id=injection.pk, actor=REAPER, reason="test", backend=WritesIgnored(backend)
    )
    injection.refresh_from_db()
    assert injection.state == InjectionState.UNCONFIRMED
    (evidence,) = injection.revert_evidence
    assert evidence["object"] == "VirtualService shop/checkout"
    assert "its routes still carry the fault of term 1" in evidence["found"]
    assert evidence["faults"][0]["experiment"] == str(exp.pk)

    # The reaper's pass, through a cluster that takes the edit, strips it and confirms.
    assert chaos_reap(backend=backend).confirmed == [injection.pk]
    assert "fault" not in _rollout_vs(backend)["spec"]["http"][0]
