"""Ownership in the service layer: canary services, rollouts and chaos targets stay in the team's namespaces."""

from __future__ import annotations

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.models import OutboxEvent
from canary import services
from canary.chaos import actuators
from canary.chaos.models import ChaosExperiment
from canary.chaos.services import experiment_create, fault_inject, fault_lease_acquire
from canary.hosts import HostRefused, canonical_service_host
from canary.metrics import MetricsConfigError
from canary.models import Rollout, RolloutStatus, Service
from canary.ownership import ForeignHost, InvalidHost, NamespaceNotOwned, namespace_owner
from canary.traffic import ISTIO_API, virtual_service
from kiln.errors import Conflict, InvalidInput, KilnError
from kiln.identity.models import Team
from kiln.identity.permissions import ENGINEER, PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import environment_in, own_namespace
from tests.chaos.test_chaos_support import abort_data, backend, chaos_settings  # noqa: F401

pytestmark = pytest.mark.django_db

BOB = Actor("bob", roles=frozenset({ENGINEER}), teams=frozenset({"search"}))
ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))


@pytest.fixture
def world(backend):  # noqa: F811
    """payments owns `shop` (label) and `payments-prod` (environment); search owns `lab` and
    `search-ranker`; `bare` exists unlabelled; `gone` was a search environment, now deleted."""
    payments = Team.objects.create(slug="payments", name="Payments")
    search = Team.objects.create(slug="search", name="Search")
    own_namespace("shop", "payments", backend)
    own_namespace("lab", "search", backend)
    environment_in("payments-prod", "payments")
    environment_in("search-ranker", "search", status="PENDING_APPROVAL")
    environment_in("gone", "search", status="DELETED")
    backend.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bare"}}])
    return {"payments": payments, "search": search}


def _nothing_written() -> bool:
    return (
        not Service.objects.exists()
        and not OutboxEvent.objects.filter(action__startswith="canary.service").exists()
    )


def test_namespace_owners_come_from_the_cluster_label_or_a_live_environment(world, backend):  # noqa: F811
    owners = {ns: namespace_owner(ns, backend) for ns in ("shop", "lab", "payments-prod")}
    assert owners == {"shop": "payments", "lab": "search", "payments-prod": "payments"}
    assert namespace_owner("search-ranker", backend) == "search"  # requested, not yet provisioned
    for nobody in ("bare", "gone", "never-heard-of"):
        assert namespace_owner(nobody, backend) is None


@pytest.mark.parametrize("namespace", ["shop", "payments-prod", "bare", "gone", "unknown"])
def test_a_service_in_a_namespace_not_the_teams_is_403_and_changes_nothing(world, namespace):
    with pytest.raises(NamespaceNotOwned) as refused:
        services.service_create(actor=BOB, team=world["search"], name="api", namespace=namespace)
    assert refused.value.http_status == 403 and namespace in refused.value.message
    assert _nothing_written()


def test_a_platform_admin_cannot_place_a_team_service_in_another_teams_namespace(world):
    with pytest.raises(NamespaceNotOwned):
        services.service_create(actor=ADMIN, team=world["search"], name="api", namespace="shop")
    assert _nothing_written()


@pytest.mark.parametrize("namespace", ["lab", "search-ranker"])
def test_a_service_in_an_own_namespace_is_stored_with_its_host_fully_qualified(world, namespace):
    service = services.service_create(
        actor=BOB, team=world["search"], name="api", namespace=namespace, host="Ranker."
    )
    assert service.host == f"ranker.{namespace}.svc.cluster.local"
    event = OutboxEvent.objects.get(action="canary.service.created")
    assert event.data["host"] == service.host and event.data["namespace"] == namespace


@pytest.mark.parametrize(
    "host, error",
    [
        ("checkout.shop.svc.cluster.local", ForeignHost),
        ("checkout.shop", ForeignHost),
        ("*.lab.svc.cluster.local", InvalidHost),
        ("10.0.0.7", InvalidHost),
        ("169.254.169.254", InvalidHost),
        ("checkout.example.com", InvalidHost),
        ("api.lab.svc.cluster.local.evil.com", InvalidHost),
        ("\u212aafka.lab", InvalidHost),
    ],
)
def test_a_host_outside_the_services_namespace_is_refused_and_changes_nothing(world, host, error):
    with pytest.raises(error) as refused:
        services.service_create(
            actor=BOB, team=world["search"], name="api", namespace="lab", host=host
        )
    assert refused.value.http_status == (403 if error is ForeignHost else 400)
    assert refused.value.extra["fields"]["host"]
    assert _nothing_written()


@pytest.mark.parametrize(
    "queries, named",
    [
        ({"requests": 'x{a="{service.__class__}"}'}, "requests"),
        ({"errors": "x[{window:>2000000000}]"}, "errors"),
        ({"latency_buckets": 'x{a="{{version!r}}"}'}, "latency_buckets"),
        ({"requests": 'x{a="{{secret}}"}'}, "requests"),
        ({"bogus": "up"}, "bogus"),
    ],
)
def test_bad_query_templates_are_400_naming_the_query(world, queries, named):
    with pytest.raises(MetricsConfigError) as refused:
        services.service_create(
            actor=BOB, team=world["search"], name="api", namespace="lab", queries=queries
        )
    assert refused.value.http_status == 400 and named in refused.value.message
    assert _nothing_written()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9090",
        "http://169.254.169.254/latest/meta-data",
        "http://prometheus.internal:9090@169.254.169.254",
        "http://prometheus.internal:9090/?x=1",
        "file:///etc/passwd",
    ],
)
def test_a_metrics_server_not_in_settings_is_refused(world, settings, url):
    settings.KILN_PROMETHEUS_URL = "http://prometheus.internal:9090"
    with pytest.raises(MetricsConfigError) as refused:
        services.service_create(
            actor=BOB,
            team=world["search"],
            name="api",
            namespace="lab",
            metrics_source="prometheus",
            prometheus_url=url,
        )
    assert "KILN_PROMETHEUS_URL" in refused.value.message
    assert _nothing_written()


def test_allowlisted_metrics_servers_are_accepted_and_none_configured_is_a_400(world, settings):
    settings.KILN_PROMETHEUS_URL = ""
    settings.KILN_PROMETHEUS_URL_ALLOWLIST = ["https://prom.search.internal/"]
    with pytest.raises(MetricsConfigError, match="KILN_PROMETHEUS_URL is not set"):
        services.service_create(
            actor=BOB,
            team=world["search"],
            name="api",
            namespace="lab",
            metrics_source="prometheus",
        )
    service = services.service_create(
        actor=BOB,
        team=world["search"],
        name="api",
        namespace="lab",
        metrics_source="prometheus",
        prometheus_url="HTTPS://Prom.Search.Internal:443",
    )
    from canary.metrics import prometheus_base_url

    assert prometheus_base_url(service.prometheus_url) == "https://prom.search.internal/"
    settings.KILN_PROMETHEUS_URL_ALLOWLIST = []  # taken off the list: the worker no longer asks it
    with pytest.raises(KilnError, match="no longer"):
        prometheus_base_url(service.prometheus_url)


def test_a_rollout_whose_namespace_changed_hands_is_refused_or_fails_at_start(world, backend):  # noqa: F811
    service = services.service_create(actor=BOB, team=world["search"], name="api", namespace="lab")
    rollout = services.rollout_create(
        actor=BOB, service=service, baseline_version="v1", canary_version="v2"
    )
    own_namespace("lab", "payments", backend)  # relabelled: lab is payments' now
    with pytest.raises(NamespaceNotOwned):
        services.rollout_create(
            actor=ADMIN, service=service, baseline_version="v2", canary_version="v3"
        )
    assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "failed"
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.FAILED and rollout.weight == 0
    assert "does not belong to team search" in rollout.reason
    assert backend.list(ISTIO_API, "VirtualService", "lab") == []
    assert backend.list(ISTIO_API, "DestinationRule", "lab") == []
    assert Rollout.objects.count() == 1


def test_a_rollout_whose_namespace_changes_hands_midway_fails_and_moves_no_more_traffic(
    world,
    backend,  # noqa: F811
):
    service = services.service_create(actor=BOB, team=world["search"], name="api", namespace="lab")
    rollout = services.rollout_create(
        actor=BOB, service=service, baseline_version="v1", canary_version="v2"
    )
    assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    rollout.refresh_from_db()
    first = rollout.weight
    assert first > 0 and rollout.status == RolloutStatus.RUNNING
    own_namespace("lab", "payments", backend)  # relabelled: lab is payments' now
    outcomes = []
    for tick in range(1, 200):
        outcomes.append(services.rollout_tick(rollout_id=rollout.pk, tick=tick))
        rollout.refresh_from_db()
        if rollout.status != RolloutStatus.RUNNING:
            break
    # The first move of traffic after the relabel (a step or a promotion) fails the rollout
    # where it stood: nothing more is routed into payments' namespace.
    assert outcomes[-1] == "failed" and rollout.status == RolloutStatus.FAILED, outcomes
    assert rollout.weight == first
    assert "does not belong to team search" in rollout.reason
    live = backend.get(ISTIO_API, "VirtualService", "lab", "api")
    weights = {r["destination"]["subset"]: r["weight"] for r in live["spec"]["http"][0]["route"]}
    assert weights.get("canary", 0) == first, weights
    assert rollout.decisions.order_by("-pk").first().kind == "failed"


def test_a_chaos_fault_on_a_foreign_host_is_refused_and_changes_nothing(world, backend):  # noqa: F811
    for host, error in (
        ("checkout.shop.svc.cluster.local", ForeignHost),
        ("checkout.shop", ForeignHost),
        ("*.shop.svc.cluster.local", InvalidInput),
        ("checkout.shop.svc.cluster.local.", ForeignHost),
    ):
        with pytest.raises(error):
            experiment_create(
                actor=BOB, data=abort_data(namespace="lab", service=host), backend=backend
            )
    assert not ChaosExperiment.objects.exists()
    assert not OutboxEvent.objects.filter(action__startswith="chaos.experiment").exists()


def test_a_fault_is_not_merged_into_a_virtual_service_exported_beyond_its_namespace(world, backend):  # noqa: F811
    theirs = virtual_service(
        name="web", namespace="lab", host="web.lab.svc.cluster.local", canary_weight=0
    )
    theirs["metadata"]["labels"] = {"owner": "search"}
    theirs["spec"].pop("exportTo")  # exported to the whole mesh, someone else's object
    backend.apply([theirs])
    exp = experiment_create(
        actor=BOB, data=abort_data(namespace="lab", service="web"), backend=backend
    )
    term = fault_lease_acquire(experiment_id=exp.pk, holder="a")
    with pytest.raises(Conflict):
        fault_inject(experiment_id=exp.pk, holder="a", term=term, backend=backend)
    live = backend.get(ISTIO_API, "VirtualService", "lab", "web")
    assert "fault" not in live["spec"]["http"][0] and "exportTo" not in live["spec"]
    assert backend.list(ISTIO_API, "VirtualService", "lab", actuators.LABEL_EXPERIMENT) == []


def test_a_fault_is_not_injected_once_the_namespace_changed_hands(world, backend):  # noqa: F811
    exp = experiment_create(
        actor=BOB, data=abort_data(namespace="lab", service="web"), backend=backend
    )
    own_namespace("lab", "payments", backend)
    term = fault_lease_acquire(experiment_id=exp.pk, holder="a")
    with pytest.raises(Conflict, match="no longer belongs"):
        fault_inject(experiment_id=exp.pk, holder="a", term=term, backend=backend)
    assert not exp.injections.exists()
    assert backend.list(ISTIO_API, "VirtualService", "lab") == []


# --- properties: whatever is accepted stays in the caller's namespaces --------------------------

NAMESPACES = ["shop", "lab", "payments-prod", "search-ranker", "bare", "gone", "kube-system"]
hosts = st.one_of(
    st.builds(
        lambda svc, ns, suffix, case, dot: (
            (f"{svc}.{ns}{suffix}".upper() if case else f"{svc}.{ns}{suffix}") + dot
        ),
        st.sampled_from(["api", "checkout", "web", "0day", "a-b"]),
        st.sampled_from(NAMESPACES + ["LAB", "lab ", "l\u0430b"]),  # Cyrillic a
        st.sampled_from(
            ["", ".svc", ".svc.cluster.local", ".svc.cluster.local.evil", ".svc.cluster"]
        ),
        st.booleans(),
        st.sampled_from(["", ".", "..", " ", "\n"]),
    ),
    st.text(max_size=40),
    st.sampled_from(["api", "API", "*", "*.lab", "127.0.0.1", "[::1]", "api:80", ""]),
)
PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _accepted_target_is_own(namespace: str, host: str, backend) -> None:  # noqa: F811
    assert namespace_owner(namespace, backend) == "search"
    assert host == canonical_service_host(host, namespace)  # fully qualified, in `namespace`
    assert host.split(".")[1] == namespace


@PROPERTY
@given(namespace=st.sampled_from(NAMESPACES) | st.text(max_size=20), host=hosts)
def test_no_accepted_canary_service_targets_a_namespace_outside_the_callers_team(
    world,
    backend,  # noqa: F811
    namespace,
    host,
):
    with transaction.atomic():
        try:
            service = services.service_create(
                actor=BOB, team=world["search"], name="api", namespace=namespace, host=host
            )
        except (KilnError, HostRefused) as refused:
            assert refused.http_status in (400, 403)  # type: ignore[union-attr]
            assert not Service.objects.exists()
        else:
            _accepted_target_is_own(service.namespace, service.host, backend)
        transaction.set_rollback(True)


@PROPERTY
@given(namespace=st.sampled_from(NAMESPACES) | st.text(max_size=20), host=hosts)
def test_no_accepted_chaos_experiment_targets_a_namespace_outside_the_callers_team(
    world,
    backend,  # noqa: F811
    namespace,
    host,
):
    with transaction.atomic():
        try:
            exp = experiment_create(
                actor=BOB,
                data=abort_data(namespace=namespace, service=host),
                start=False,
                backend=backend,
            )
        except KilnError as refused:
            assert refused.http_status in (400, 403)
            assert not ChaosExperiment.objects.exists()
        else:
            assert exp.team.slug == "search"
            _accepted_target_is_own(exp.namespace, exp.service, backend)
        transaction.set_rollback(True)
