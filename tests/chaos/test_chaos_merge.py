# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""HTTP faults on a host a rollout already routes go into the rollout's VirtualService, not beside it."""

from __future__ import annotations

import dataclasses
import io
import json
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext
from kubernetes import client as k8s

from canary import routes, services
from canary.chaos import actuators
from canary.chaos.models import ChaosInjection, ChaosLease
from canary.chaos.reaper import chaos_reap
from canary.chaos.services import (
    experiment_create,
    fault_inject,
    fault_lease_acquire,
    fault_revert,
)
from canary.traffic import ISTIO_API, canary_weight_of, virtual_service
from kiln.cluster.kubernetes import KubernetesBackend
from kiln.cluster.models import SimulatedObject
from kiln.errors import Conflict
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.chaos.test_chaos_actuators import _validate
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    backend,
    chaos_settings,
    engineer,
    shop,
)
from tests.cluster.fake_kube import FakeKube

pytestmark = pytest.mark.django_db

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
VS_CRD = "networking.istio.io/virtualservices.yaml"


@pytest.fixture
def rollout(shop):
    """A running rollout of shop/checkout: its VirtualService routes checkout.shop.svc.cluster.local."""
    service = services.service_create(
        actor=ADMIN,
        team=Team.objects.get(slug="payments"),
        name="checkout",
        namespace="shop",
        sim_traffic_class="steady",
    )
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", ticks_per_step=3
    )
    assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    rollout.refresh_from_db()
    return rollout


def _rollout_vs(backend) -> dict:
    return backend.get(ISTIO_API, "VirtualService", "shop", "checkout")


def _standalone(backend) -> list[dict]:
    return backend.list(ISTIO_API, "VirtualService", "shop", actuators.LABEL_EXPERIMENT)


def _start(engineer, backend, holder: str = "a", **over):
    """An experiment on `checkout` (the short name) with its lease held and the fault injected;
    every experiment here allows overlaps, so several faults meet on one route."""
    data = abort_data(service="checkout", **{"may_overlap": True, **over})
    exp = experiment_create(actor=engineer, data=data, backend=backend)
    term = fault_lease_acquire(experiment_id=exp.pk, holder=holder)
    assert term is not None
    return exp, fault_inject(experiment_id=exp.pk, holder=holder, term=term, backend=backend)


def _renewed(exp):
    """The lease's last renewal: a reaper pass at that instant finds every lease held."""
    return ChaosLease.objects.get(pk=exp.pk).renewed_at


def _route(vs: dict) -> dict:
    (route,) = vs["spec"]["http"]
    return route


def _weights(vs: dict) -> list[tuple[str, int]]:
    return [(d["destination"]["subset"], d["weight"]) for d in _route(vs)["route"]]


def test_a_fault_goes_into_the_rollout_virtual_service_with_weights_untouched(
    engineer, backend, rollout
):
    before = _rollout_vs(backend)
    exp, inj = _start(engineer, backend)
    vs = _rollout_vs(backend)
    assert _standalone(backend) == []
    assert _weights(vs) == _weights(before) and canary_weight_of(vs) == rollout.weight > 0
    # 50% asked, capped by the 25% blast radius.
    assert _route(vs)["fault"] == {"abort": {"httpStatus": 503, "percentage": {"value": 25.0}}}
    entries = json.loads(vs["metadata"]["annotations"][actuators.ANNOTATION_FAULTS])
    assert entries == [
        {"experiment": str(exp.pk), "key": "abort", "route": "canary-split", "token": 1}
    ]
    assert vs["metadata"]["annotations"]["kiln.dev/rollout"] == str(rollout.pk)
    # The rollout's labels stay; the merged-fault label lets the reaper select this object.
    assert vs["metadata"]["labels"] == {
        **before["metadata"]["labels"],
        actuators.LABEL_MERGED: "true",
    }
    _validate(vs, VS_CRD)
    assert inj.applied == [
        {
            "apiVersion": ISTIO_API,
            "kind": "VirtualService",
            "namespace": "shop",
            "name": "checkout",
            "merged": True,
            "experiment": str(exp.pk),
            "token": 1,
        }
    ]
    assert actuators.in_effect(backend, inj.applied)
    # Simulated traffic sees the merged fault by the rollout's host and by the short name.
    host = rollout.service.host
    assert actuators.simulated_fault_effect(backend, "shop", host).error_rate == pytest.approx(0.25)
    assert actuators.simulated_fault_effect(backend, "shop", "checkout").error_rate == (
        pytest.approx(0.25)
    )
    assert actuators.simulated_fault_effect(backend, "shop", "web").error_rate == 0.0


def test_revert_removes_only_its_own_fault_and_restores_the_rollout_object(
    engineer, backend, rollout
):
    abort_exp, abort_inj = _start(engineer, backend)
    delay_exp, delay_inj = _start(
        engineer, backend, name="slow checkout", fault="http-delay", delay_ms=300
    )
    vs = _rollout_vs(backend)
    assert set(_route(vs)["fault"]) == {"abort", "delay"}
    _validate(vs, VS_CRD)
    effect = actuators.simulated_fault_effect(backend, "shop", rollout.service.host)
    assert effect.error_rate == pytest.approx(0.25) and effect.added_latency_ms == 75.0

    assert fault_revert(injection_id=abort_inj.pk, actor=ADMIN, reason="done", backend=backend)
    vs = _rollout_vs(backend)
    assert _route(vs)["fault"] == {"delay": {"fixedDelay": "300ms", "percentage": {"value": 25.0}}}
    entries = json.loads(vs["metadata"]["annotations"][actuators.ANNOTATION_FAULTS])
    assert [(e["experiment"], e["key"]) for e in entries] == [(str(delay_exp.pk), "delay")]
    assert not actuators.in_effect(backend, abort_inj.applied)
    assert actuators.in_effect(backend, delay_inj.applied)
    # Reverting again changes nothing.
    assert actuators.revert(backend, abort_inj.applied) == 0
    assert _rollout_vs(backend)["metadata"]["resourceVersion"] == vs["metadata"]["resourceVersion"]

    assert fault_revert(injection_id=delay_inj.pk, actor=ADMIN, reason="done", backend=backend)
    vs = _rollout_vs(backend)
    built = virtual_service(
        name="checkout",
        namespace="shop",
        host=rollout.service.host,
        canary_weight=rollout.weight,
        rollout_id=str(rollout.pk),
        intent=rollout.routes.latest("id").pk,
    )
    assert vs["spec"] == built["spec"]
    assert vs["metadata"]["annotations"] == built["metadata"]["annotations"]
    assert actuators.simulated_fault_effect(backend, "shop", "checkout") == actuators.FaultEffect()
    assert abort_exp.pk != delay_exp.pk


def test_a_second_abort_on_the_same_route_is_refused_and_leaves_the_first(
    engineer, backend, rollout
):
    first, first_inj = _start(engineer, backend)
    exp = experiment_create(
        actor=engineer,
        data=abort_data(service="checkout", name="again", may_overlap=True),
        backend=backend,
    )
    fault_lease_acquire(experiment_id=exp.pk, holder="b")
    with pytest.raises(Conflict) as raised:
        fault_inject(experiment_id=exp.pk, holder="b", term=1, backend=backend)
    assert raised.value.extra == {"reason": "fault_conflict"}
    failed = ChaosInjection.objects.get(experiment=exp)
    assert failed.reverted_at is not None and failed.revert_reason == "inject failed"
    entries = json.loads(
        _rollout_vs(backend)["metadata"]["annotations"][actuators.ANNOTATION_FAULTS]
    )
    assert [e["experiment"] for e in entries] == [str(first.pk)]
    assert actuators.in_effect(backend, first_inj.applied) and _standalone(backend) == []


def test_a_rollout_step_while_a_fault_is_active_keeps_the_fault(engineer, backend, rollout):
    exp, inj = _start(engineer, backend)
    fault = _route(_rollout_vs(backend))["fault"]
    services.rollout_promote(actor=ADMIN, rollout=rollout, reason="ship it")
    vs = _rollout_vs(backend)
    assert canary_weight_of(vs) == 100
    assert _route(vs)["fault"] == fault
    entries = json.loads(vs["metadata"]["annotations"][actuators.ANNOTATION_FAULTS])
    assert [(e["experiment"], e["token"]) for e in entries] == [(str(exp.pk), 1)]
    _validate(vs, VS_CRD)
    # The revert after the step removes the fault and keeps the new weights.
    fault_revert(injection_id=inj.pk, actor=ADMIN, reason="done", backend=backend)
    vs = _rollout_vs(backend)
    assert "fault" not in _route(vs) and canary_weight_of(vs) == 100
    assert actuators.ANNOTATION_FAULTS not in vs["metadata"]["annotations"]


def test_the_reaper_removes_a_crashed_holders_merged_fault(engineer, backend, rollout):
    exp, inj = _start(engineer, backend)
    later = ChaosLease.objects.get(pk=exp.pk).renewed_at + timedelta(seconds=1.0)
    assert chaos_reap(backend=backend, now=later).reverted == [inj.pk]
    vs = _rollout_vs(backend)
    assert "fault" not in _route(vs)
    assert actuators.ANNOTATION_FAULTS not in vs["metadata"]["annotations"]
    assert canary_weight_of(vs) == rollout.weight
    assert not actuators.in_effect(backend, ChaosInjection.objects.get(pk=inj.pk).applied)


def test_the_reaper_strips_a_merged_fault_no_injection_accounts_for(engineer, backend, rollout):
    """A holder that merged its fault and died before its row said so, or wrote after losing its term."""
    exp, inj = _start(engineer, backend)
    spec = actuators.FaultSpec(
        experiment_id=str(exp.pk),
        namespace="shop",
        selector={"app": "web"},
        fault="http-delay",
        service="checkout",
        delay_ms=100,
    )
    assert actuators.merge_fault(backend, spec, 9, "checkout")  # term 9 has no live injection
    assert set(_route(_rollout_vs(backend))["fault"]) == {"abort", "delay"}
    result = chaos_reap(backend=backend, now=_renewed(exp))
    assert result.reverted == []
    assert result.strays == [
        {
            "apiVersion": ISTIO_API,
            "kind": "VirtualService",
            "namespace": "shop",
            "name": "checkout",
            "merged": True,
        }
    ]
    vs = _rollout_vs(backend)
    assert set(_route(vs)["fault"]) == {"abort"}  # the live term's fault stays
    assert actuators.in_effect(backend, inj.applied)
    assert chaos_reap(backend=backend, now=_renewed(exp)).strays == []


def test_an_old_terms_revert_never_removes_a_newer_terms_fault(engineer, backend, rollout):
    exp, old = _start(engineer, backend)
    spec = actuators.FaultSpec(
        experiment_id=str(exp.pk),
        namespace="shop",
        selector={"app": "web"},
        fault="http-abort",
        service="checkout",
        abort_http_status=500,
        percent=10.0,
    )
    # Term 2 writes its fault while term 1's revert is still to come (split brain).
    assert actuators.merge_fault(backend, spec, 2, "checkout")
    # A late write of term 1 does not replace term 2's fault, and its revert removes nothing.
    actuators.merge_fault(backend, dataclasses.replace(spec, percent=90.0), 1, "checkout")
    assert actuators.revert(backend, old.applied) == 0
    vs = _rollout_vs(backend)
    assert _route(vs)["fault"] == {"abort": {"httpStatus": 500, "percentage": {"value": 10.0}}}
    entries = json.loads(vs["metadata"]["annotations"][actuators.ANNOTATION_FAULTS])
    assert [(e["experiment"], e["token"]) for e in entries] == [(str(exp.pk), 2)]
    assert fault_revert(
        injection_id=old.pk, actor=ADMIN, reason="lease term ended", backend=backend
    )
    assert "fault" in _route(_rollout_vs(backend))
    newer = [{**old.applied[0], "token": 2}]
    assert actuators.in_effect(backend, newer) and not actuators.in_effect(backend, old.applied)
    assert actuators.revert(backend, newer) == 1
    assert "fault" not in _route(_rollout_vs(backend))


def test_without_a_rollout_the_fault_is_a_standalone_virtual_service(engineer, backend, shop):
    exp, inj = _start(engineer, backend)
    (vs,) = _standalone(backend)
    assert vs["metadata"]["name"] == actuators.object_name(
        actuators.FaultSpec(
            experiment_id=str(exp.pk), namespace="shop", selector={}, fault="http-abort"
        ),
        1,
    )
    assert vs["spec"]["hosts"] == ["checkout.shop.svc.cluster.local"]
    assert vs["spec"]["exportTo"] == ["."] and "merged" not in inj.applied[0]
    assert vs["metadata"]["labels"][actuators.LABEL_TOKEN] == "1"
    _validate(vs, VS_CRD)
    assert actuators.simulated_fault_effect(backend, "shop", "checkout").error_rate == (
        pytest.approx(0.25)
    )
    assert fault_revert(injection_id=inj.pk, actor=ADMIN, reason="done", backend=backend)
    assert not actuators.in_effect(backend, inj.applied) and _standalone(backend) == []


class PreconditionKube(FakeKube):
    """The fake API server, plus Kubernetes' apply precondition: a stale metadata.resourceVersion is a 409.

    `concurrent_writes` bumps the object's resourceVersion just before the next
    that many applies, as another writer would.
    """

    def __init__(self) -> None:
        super().__init__()
        self.concurrent_writes = 0
        self.conflicts = 0

    def _handler(self):
        base = super()._handler()
        fake = self

        class Handler(base):
            def do_PATCH(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                route = self._route()
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                if route is not None and route[4]:
                    key = (route[0], route[3], route[1], route[4])
                    with fake.lock:
                        live = fake.objects.get(key)
                        if live is not None and fake.concurrent_writes > 0:
                            fake.concurrent_writes -= 1
                            meta = live["metadata"]
                            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
                        if (
                            live is not None
                            and wanted
                            and wanted != live["metadata"]["resourceVersion"]
                        ):
                            fake.conflicts += 1
                            return self._status(409, "Conflict", "the object has been modified")
                self.rfile = io.BytesIO(raw)
                return super().do_PATCH()

        return Handler


@pytest.fixture
def kube():
    fake = PreconditionKube().start()
    yield fake
    fake.stop()


def test_on_kubernetes_the_merge_is_a_conditional_apply_retried_on_conflict(kube):
    backend = KubernetesBackend(k8s.ApiClient(k8s.Configuration(host=kube.url)), timeout=5)
    host = "checkout.shop.svc.cluster.local"
    rollout_vs = virtual_service(
        name="checkout", namespace="shop", host=host, canary_weight=10, rollout_id="r1"
    )
    routes.rollout_routes_write(backend, [rollout_vs])
    spec = actuators.FaultSpec(
        experiment_id="0f8e2a8c-1111-4222-8333-944445555666",
        namespace="shop",
        selector={"app": "checkout"},
        fault="http-delay",
        service="checkout",
        delay_ms=200,
        percent=50.0,
    )
    kube.concurrent_writes = 1  # someone writes the VirtualService between our read and apply
    injected = actuators.inject(backend, spec, 4)
    assert kube.conflicts == 1
    assert [r["name"] for r in injected.applied] == ["checkout"] and injected.applied[0]["merged"]
    live = backend.get(ISTIO_API, "VirtualService", "shop", "checkout")
    assert _route(live)["fault"] == {
        "delay": {"fixedDelay": "200ms", "percentage": {"value": 50.0}}
    }
    assert _weights(live) == [("baseline", 90), ("canary", 10)]
    assert live["metadata"]["managedFields"][0]["manager"] == actuators.MERGE_FIELD_MANAGER
    _validate({k: v for k, v in live.items() if k != "status"}, VS_CRD)
    applies = [
        r["body"]
        for r in kube.requests
        if r.get("method") == "PATCH" and (r.get("body") or {}).get("kind") == "VirtualService"
    ]
    assert all(b["metadata"].get("resourceVersion") for b in applies[1:])
    assert [vs["metadata"]["name"] for vs in backend.list(ISTIO_API, "VirtualService", "shop")] == [
        "checkout"
    ]

    # The rollout's next step re-applies its weights (also conditionally) and keeps the fault.
    kube.concurrent_writes = 1
    step = virtual_service(
        name="checkout", namespace="shop", host=host, canary_weight=50, rollout_id="r1"
    )
    routes.rollout_routes_write(backend, [step])
    assert kube.conflicts == 2
    live = backend.get(ISTIO_API, "VirtualService", "shop", "checkout")
    assert _weights(live) == [("baseline", 50), ("canary", 50)] and "fault" in _route(live)
    assert actuators.effective_percent(spec) == 50.0
    assert actuators.fault_effect([live], "checkout", "shop").added_latency_ms == 100.0

    assert actuators.revert(backend, injected.applied) == 1
    live = backend.get(ISTIO_API, "VirtualService", "shop", "checkout")
    assert "fault" not in _route(live) and _weights(live) == [("baseline", 50), ("canary", 50)]
    assert live["metadata"]["annotations"] == {"kiln.dev/rollout": "r1"}
    assert actuators.revert(backend, injected.applied) == 0


def test_a_rollout_started_during_a_fault_adopts_the_standalone_fault(engineer, backend, shop):
    exp, inj = _start(engineer, backend)
    (standalone,) = _standalone(backend)
    service = services.service_create(
        actor=ADMIN,
        team=Team.objects.get(slug="payments"),
        name="checkout",
        namespace="shop",
        sim_traffic_class="steady",
    )
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )
    assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    # One VirtualService routes the host: the rollout's, carrying the fault of the same term.
    assert _standalone(backend) == []
    vs = _rollout_vs(backend)
    assert _route(vs)["fault"] == standalone["spec"]["http"][0]["fault"]
    entries = json.loads(vs["metadata"]["annotations"][actuators.ANNOTATION_FAULTS])
    assert [(e["experiment"], e["token"]) for e in entries] == [(str(exp.pk), 1)]
    assert canary_weight_of(vs) > 0
    _validate(vs, VS_CRD)
    assert actuators.in_effect(backend, inj.applied)
    assert actuators.simulated_fault_effect(backend, "shop", service.host).error_rate == (
        pytest.approx(0.25)
    )
    assert (
        chaos_reap(backend=backend, now=_renewed(exp)).strays == []
    )  # the adopted fault is still accounted for
    assert fault_revert(injection_id=inj.pk, actor=ADMIN, reason="done", backend=backend)
    vs = _rollout_vs(backend)
    assert "fault" not in _route(vs) and canary_weight_of(vs) > 0
    assert not actuators.in_effect(backend, inj.applied)


def test_a_traffic_shift_in_a_crowded_namespace_reads_only_what_it_may_adopt(backend, rollout):
    """Other VirtualServices of the namespace stay unread, and the cluster is not swept."""
    backend.apply(
        [
            virtual_service(
                name=f"other-{i}",
                namespace="shop",
                host=f"other-{i}.shop.svc.cluster.local",
                canary_weight=10,
            )
            for i in range(20)
        ]
    )
    loaded: list[str] = []

    def count(sender, instance, **kwargs):
        loaded.append(instance.name)

    manifest = virtual_service(
        name="checkout",
        namespace="shop",
        host=rollout.service.host,
        canary_weight=30,
        rollout_id=str(rollout.pk),
    )
    post_init.connect(count, sender=SimulatedObject)
    try:
        with CaptureQueriesContext(connection) as queries:
            routes.rollout_routes_write(backend, [manifest])
    finally:
        post_init.disconnect(count, sender=SimulatedObject)
    assert not [name for name in loaded if name.startswith("other-")]
    # No sweep for finalized objects (a scan of the whole simulated cluster) on a traffic shift.
    assert not [q for q in queries if '"finalizers_clear_at" <=' in q["sql"]]
    assert canary_weight_of(_rollout_vs(backend)) == 30
