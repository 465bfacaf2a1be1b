"""The simulated cluster: apply/get/list/delete/health, delays, finalizers and injected failures."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext

from kiln.cluster import AppliedRef, DeliveryError, HealthStatus, InvalidManifest
from kiln.cluster.backends import get_backend
from kiln.cluster.models import SimulatedObject
from kiln.cluster.simulated import SimulatedBackend
from kiln.cluster.simulated_failures import inject_failure

pytestmark = pytest.mark.django_db


def vs(name: str = "checkout", weight: int = 10, namespace: str = "shop") -> dict:
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name, "tier": "web"}},
        "spec": {
            "hosts": [name],
            "http": [
                {
                    "route": [
                        {"destination": {"host": name, "subset": "stable"}, "weight": 100 - weight},
                        {"destination": {"host": name, "subset": "canary"}, "weight": weight},
                    ]
                }
            ],
        },
    }


def ns(name: str = "shop") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kiln.dev/team": "payments"}},
    }


@pytest.fixture(autouse=True)
def _zero_delays(settings):
    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"


def test_get_backend_returns_the_configured_backend(settings):
    assert isinstance(get_backend(), SimulatedBackend)
    with pytest.raises(DeliveryError) as err:
        get_backend("nope")
    assert err.value.retryable is False


def test_apply_then_get_round_trips_any_kind_and_reports_server_fields():
    backend = get_backend()
    [ref] = backend.apply([vs()])
    assert ref == AppliedRef(
        "networking.istio.io/v1", "VirtualService", "shop", "checkout", 1, ref.uid
    )
    obj = backend.get("networking.istio.io/v1", "VirtualService", "shop", "checkout")
    assert obj["spec"]["http"][0]["route"][1]["weight"] == 10
    assert obj["metadata"]["generation"] == 1
    assert obj["metadata"]["uid"] == ref.uid
    assert backend.health(ref).status == HealthStatus.HEALTHY
    assert backend.get("networking.istio.io/v1", "VirtualService", "shop", "other") is None


def test_reapplying_the_same_manifest_is_a_noop_and_a_change_bumps_generation():
    backend = get_backend()
    backend.apply([vs()])
    [same] = backend.apply([vs()])
    assert same.generation == 1
    [changed] = backend.apply([vs(weight=50)])
    assert changed.generation == 2
    assert SimulatedObject.objects.count() == 1
    obj = backend.get(*changed.key)
    assert obj["spec"]["http"][0]["route"][1]["weight"] == 50


def test_invalid_manifest_applies_nothing():
    backend = get_backend()
    with pytest.raises(InvalidManifest):
        backend.apply(
            [vs(), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}]
        )
    assert SimulatedObject.objects.count() == 0


def test_list_filters_by_namespace_and_label_selector():
    backend = get_backend()
    backend.apply([vs("a"), vs("b"), vs("c", namespace="other")])
    names = [
        o["metadata"]["name"]
        for o in backend.list("networking.istio.io/v1", "VirtualService", "shop")
    ]
    assert names == ["a", "b"]
    picked = backend.list(
        "networking.istio.io/v1", "VirtualService", label_selector="app=c,tier=web"
    )
    assert [o["metadata"]["name"] for o in picked] == ["c"]
    assert (
        backend.list("networking.istio.io/v1", "VirtualService", label_selector="app!=a,!missing")
        != []
    )
    assert backend.list("networking.istio.io/v1", "VirtualService", label_selector="missing") == []


def test_a_selective_list_reads_only_the_objects_its_selector_can_match():
    backend = get_backend()
    backend.apply([vs(f"bulk-{i}") for i in range(20)] + [vs("c")])
    loaded: list[str] = []

    def count(sender, instance, **kwargs):
        loaded.append(instance.name)

    post_init.connect(count, sender=SimulatedObject)
    try:
        picked = backend.list("networking.istio.io/v1", "VirtualService", "shop", "app=c,tier")
        assert [o["metadata"]["name"] for o in picked] == ["c"]
        assert loaded == ["c"]  # the 20 others stay in the database
        loaded.clear()
        assert backend.list("networking.istio.io/v1", "VirtualService", "shop", "absent") == []
        assert loaded == []
        # Terms the database does not narrow by are still applied to what it returns.
        picked = backend.list("networking.istio.io/v1", "VirtualService", "shop", "tier,app!=c")
        assert len(picked) == 20 and "c" not in [o["metadata"]["name"] for o in picked]
    finally:
        post_init.disconnect(count, sender=SimulatedObject)


def test_readiness_comes_after_the_configured_delay(settings, clock):
    settings.KILN_SIM_DELAY_PROFILE = "realistic"
    settings.KILN_SIM_DELAY_SCALE = 1.5  # VirtualService: 1.0 s x 1.5
    backend = get_backend()
    [ref] = backend.apply([vs()])
    assert backend.health(ref).status == HealthStatus.PROGRESSING
    clock.advance(1.4)
    assert backend.health(ref).status == HealthStatus.PROGRESSING  # not before its 1.5 s
    clock.advance(0.2)
    assert backend.health(ref).status == HealthStatus.HEALTHY


def test_never_ready_and_degraded_failures_are_reported():
    inject_failure("never_ready", kind="VirtualService", name="a")
    inject_failure("degraded", kind="VirtualService", name="b")
    backend = get_backend()
    a, b, c = backend.apply([vs("a"), vs("b"), vs("c")])
    assert backend.health(a).status == HealthStatus.PROGRESSING
    assert backend.health(b).status == HealthStatus.DEGRADED
    assert backend.health(c).status == HealthStatus.HEALTHY


def test_apply_error_fires_the_injected_number_of_times_then_succeeds():
    inject_failure("apply_error", kind="VirtualService", times=1)
    backend = get_backend()
    with pytest.raises(DeliveryError) as err:
        backend.apply([vs()])
    assert err.value.retryable
    assert SimulatedObject.objects.count() == 0
    [ref] = backend.apply([vs()])
    assert backend.get(*ref.key) is not None


def test_delete_waits_for_finalizers_and_a_stuck_one_never_clears(settings):
    backend = get_backend()
    inject_failure("stuck_finalizer", kind="VirtualService", name="stuck")
    ok, stuck = backend.apply([vs("ok"), vs("stuck")])
    assert backend.delete(ok) is True
    assert backend.get(*ok.key) is None
    assert backend.delete(ok) is False
    assert backend.delete(stuck) is True
    obj = backend.get(*stuck.key)
    assert obj["metadata"]["deletionTimestamp"]
    assert backend.health(stuck).status == HealthStatus.DELETING
    with pytest.raises(DeliveryError):
        backend.apply([vs("stuck")])
    backend.clear_finalizers(stuck)
    assert backend.get(*stuck.key) is None


def test_deleting_a_namespace_deletes_its_contents_and_waits_for_stuck_ones():
    backend = get_backend()
    inject_failure("stuck_finalizer", kind="VirtualService", name="stuck")
    ns_ref, _, stuck = backend.apply([ns(), vs("fine"), vs("stuck")])
    backend.delete(ns_ref)
    assert backend.get("networking.istio.io/v1", "VirtualService", "shop", "fine") is None
    assert backend.get(*ns_ref.key)["status"]["phase"] == "Terminating"
    with pytest.raises(DeliveryError):
        backend.apply([vs("new")])
    backend.clear_finalizers(stuck)
    assert backend.get(*ns_ref.key) is None


def _delete_namespace_statements(backend, name: str, objects: int) -> int:
    backend.apply([ns(name)] + [vs(f"svc-{i}", namespace=name) for i in range(objects)])
    with CaptureQueriesContext(connection) as statements:
        backend.delete(AppliedRef("v1", "Namespace", "", name))
    assert not SimulatedObject.objects.filter(namespace=name).exists()
    assert backend.get("v1", "Namespace", None, name) is None
    return len(statements)


def test_deleting_a_namespace_costs_the_same_statements_however_much_it_holds():
    backend = get_backend()
    # Its contents are marked deleting and removed together, not one object (and one scan of
    # the cluster) at a time.
    few = _delete_namespace_statements(backend, "few", 2)
    many = _delete_namespace_statements(backend, "many", 30)
    assert many == few


def test_a_deletion_removes_only_its_own_namespace_and_reads_still_see_the_rest_gone(
    settings, clock
):
    backend = get_backend()
    settings.KILN_SIM_DELAY_PROFILE, settings.KILN_SIM_FINALIZER_SECONDS = "fast", 0.05
    [other] = backend.apply([vs("other", namespace="elsewhere")])
    [mine] = backend.apply([vs("mine")])
    backend.delete(other)
    clock.advance(0.1)  # the other object's finalizers have cleared; nobody has looked since
    backend.delete(mine)
    assert SimulatedObject.objects.filter(namespace="elsewhere").exists()  # not reconciled yet
    assert backend.get(*other.key) is None  # a read sees it gone all the same
    assert backend.list("networking.istio.io/v1", "VirtualService", "elsewhere") == []


def test_set_status_is_merged_into_the_live_object():
    backend = get_backend()
    [ref] = backend.apply([vs()])
    backend.set_status(ref, {"canary": {"requests": 10}})
    assert backend.get(*ref.key)["status"]["canary"] == {"requests": 10}
    assert backend.get(*ref.key)["status"]["conditions"][0]["type"] == "Ready"
