# ruff: noqa: F811 - fixtures imported from tests/chaos/test_chaos_support.py are requested by name
"""Disruption freezes: Kiln's own work keeps Karpenter off its nodes, and lets go.

The pure rules first (scheduler/disruption.py: a frozen node is not consolidated or
drift-replaced, expiry waits for it until the NodePool's terminationGracePeriod has
passed), then end to end on the simulated cluster: a rollout under analysis freezes its
canary's node, consolidation takes a node just like it but not that one, and the
rollout's end thaws it; an experiment whose controller died stops renewing and the
chaos reaper thaws its targets' node; a frozen node past its hard expiry bound is taken
anyway, and that is audited.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import OutboxEvent
from canary import services as canary_services
from canary.chaos.models import ChaosLease
from canary.chaos.reaper import chaos_reap
from canary.chaos.services import experiment_create, fault_lease_acquire, fault_lease_renew
from canary.models import RolloutStatus
from kiln.cluster import AppliedRef
from kiln.cluster.nodes import (
    A_DO_NOT_DISRUPT,
    A_FROZEN_BY,
    PodBinding,
    annotations_of,
    is_frozen,
    node_manifest,
    node_status,
    pod_manifest,
)
from kiln.errors import Forbidden
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor, system_actor
from scheduler import disruption as d
from scheduler.freezes import (
    Holder,
    disruption_freeze_hold,
    disruption_freezes_reap,
)
from scheduler.karpenter import Pool
from scheduler.models import DisruptionFreeze
from scheduler.simulation.disruption import nodes_disrupt
from tests.canary.test_ownership_support import own_namespace
from tests.chaos.test_chaos_support import (  # noqa: F401 - fixtures, requested by name
    abort_data,
    backend,
    chaos_settings,
    engineer,
    shop,
)

GIB = 2.0**30
ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
ANALYZER = system_actor("canary-analyzer")


# --- the rules (no database) ------------------------------------------------------------------


def pool(**kw) -> Pool:
    return Pool("p", "", {}, [], [], (1e9, 1e18, 1e9), **kw)


def state(
    name, *, age=10.0, empty_for=None, frozen=False, drifted=False, pods=(), free=(4, 16 * GIB, 0)
):
    return d.NodeState(
        name, "p", age=age, empty_for=empty_for, disrupting=False, frozen=frozen,
        drifted=drifted, labels={}, free=free, pods=tuple(pods),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("age", "frozen", "grace", "reason"),
    [
        (3700.0, False, 1800.0, d.EXPIRED),  # 3,700 s >= expireAfter 3,600 s: forceful
        (3700.0, True, 1800.0, None),  # frozen: waits until 3,600 + 1,800 = 5,400 s
        (5400.0, True, 1800.0, d.EXPIRED_PAST_GRACE),  # the hard bound wins over the mark
        (99999.0, True, None, None),  # no terminationGracePeriod: held as long as it is marked
        (3500.0, False, 1800.0, None),  # not expired yet
    ],
    ids=["expired", "frozen-within-grace", "frozen-past-grace", "frozen-no-grace", "young"],
)
def test_expiry_waits_for_a_frozen_node_only_until_the_termination_grace_period(
    age, frozen, grace, reason
):
    p = pool(expire_after=3600.0, termination_grace=grace)
    assert d.expiry_reason(p, state("n", age=age, frozen=frozen)) == reason


def test_a_frozen_node_is_neither_consolidated_nor_replaced_for_drift():
    p = pool(consolidate_after=60.0, budget="100%")
    nodes = [
        state("empty", empty_for=90.0),
        state("empty-frozen", empty_for=90.0, frozen=True),
        state("drifted", drifted=True),
        state("drifted-frozen", drifted=True, frozen=True),
    ]
    # Budget 100% of 4 nodes: room for all; only the two unmarked ones go.
    assert d.plan_disruptions([p], nodes) == [("drifted", d.DRIFTED), ("empty", d.EMPTY)]


def test_an_underutilised_node_goes_when_its_pods_fit_elsewhere_unless_frozen():
    pod = (1.0, 2 * GIB, 0.0, {})
    p = pool(consolidate_after=60.0, budget="1", consolidation_policy=d.WHEN_UNDERUTILIZED)
    # "light" (1 core) fits on "roomy" (3 cores free); "heavy" (3 x 1 core) would too, but the
    # least loaded goes first and the budget of 1 stops there.
    nodes = [
        state("light", age=120.0, pods=[pod], free=(3.0, 14 * GIB, 0.0)),
        state("heavy", age=120.0, pods=[pod] * 3, free=(1.0, 10 * GIB, 0.0)),
        state("roomy", age=120.0, free=(3.0, 16 * GIB, 0.0), pods=[]),
    ]
    assert d.plan_disruptions([p], nodes) == [("light", d.UNDERUTILIZED)]
    frozen = [state("light", age=120.0, pods=[pod], frozen=True, free=(3.0, 14 * GIB, 0.0))]
    assert d.plan_disruptions([p], frozen + nodes[1:]) == [("heavy", d.UNDERUTILIZED)]
    # Only onto a node of the same capacity pool (type, zone, capacity type): elsewhere the
    # workload's spread over capacity pools would change.
    other_pool = {"topology.kubernetes.io/zone": "b"}
    roomy_elsewhere = d.NodeState(
        "roomy", "p", age=120.0, empty_for=None, disrupting=False, labels=other_pool,
        free=(3.0, 16 * GIB, 0.0), pods=(),
    )  # fmt: skip
    assert d.plan_disruptions([p], [nodes[0], roomy_elsewhere]) == []
    # A pod whose nodeSelector no other node satisfies keeps its node.
    pinned = (1.0, 2 * GIB, 0.0, {"nodeSelector": {"zone": "a"}})
    assert d.plan_disruptions([p], [state("light", age=120.0, pods=[pinned]), nodes[2]]) == []


# --- the simulated cluster -------------------------------------------------------------------


@pytest.fixture
def cluster(settings):
    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    settings.KILN_SIM_FINALIZER_SECONDS = 0.0
    from kiln.cluster.backends import get_backend

    return get_backend("simulated")


def nodepool(name="p", *, template=None, consolidate="1m") -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"requirements": [], **(template or {})}},
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": consolidate,
                "budgets": [{"nodes": "100%"}],
            },
        },
    }


def add_nodes(backend, *names, pool_name="p") -> None:
    backend.apply(
        [
            node_manifest(name=n, instance_type="m6i.xlarge", zone="us-east-1a",
                          capacity_type="on-demand", nodepool=pool_name)
            for n in names
        ]
    )  # fmt: skip
    backend.update_status(
        [(AppliedRef("v1", "Node", "", n), node_status(cpu=4, memory=16 * 2**30, gpu=0)) for n in names]
    )  # fmt: skip


def add_pod(backend, namespace, name, node, labels) -> None:
    template = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m"}}}]},
    }
    backend.apply(
        [pod_manifest(namespace=namespace, name=name, owner_kind="ReplicaSet",
                      owner_name=f"{name}-rs", owner_uid=f"uid-{name}", template=template)]
    )  # fmt: skip
    assert backend.bind_pods([PodBinding(namespace, name, node)]) == 1


def node(backend, name) -> dict:
    return backend.get("v1", "Node", None, name)


def actions(prefix: str) -> list[str]:
    return list(
        OutboxEvent.objects.filter(target__startswith=prefix)
        .order_by("id")
        .values_list("action", flat=True)
    )


@pytest.mark.django_db
def test_an_analysing_rollout_freezes_its_canary_node_consolidation_skips_it_and_it_thaws(
    cluster,
):
    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", team.slug)
    cluster.apply([nodepool()])
    add_nodes(cluster, "n-canary", "n-baseline", "n-spare")
    add_pod(cluster, "shop", "checkout-v2-0", "n-canary", {"app": "checkout", "version": "v2"})
    add_pod(cluster, "shop", "checkout-v1-0", "n-baseline", {"app": "checkout", "version": "v1"})
    service = canary_services.service_create(
        actor=ADMIN, team=team, name="checkout", namespace="shop", sim_traffic_class="steady"
    )
    rollout = canary_services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", ticks_per_step=3
    )
    assert canary_services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"

    # Analysing: the canary's node is frozen, and only it.
    assert is_frozen(node(cluster, "n-canary"))
    assert annotations_of(node(cluster, "n-canary"))[A_FROZEN_BY] == f"rollout/{rollout.pk}"
    assert not is_frozen(node(cluster, "n-baseline"))
    [row] = DisruptionFreeze.objects.all()
    assert (row.node, row.holder_kind, row.holder_id) == ("n-canary", "rollout", str(rollout.pk))
    assert row.applied_at is not None and row.released_at is None
    assert actions("scheduler:node:n-canary") == ["scheduler.node.frozen"]

    # Consolidation, ten minutes on: the baseline's node is underutilised and goes (its pod
    # fits elsewhere); the canary's node is just like it, but frozen.
    later = timezone.now() + timedelta(minutes=10)
    assert nodes_disrupt(backend=cluster, now=later) == [("n-baseline", d.UNDERUTILIZED)]
    assert node(cluster, "n-canary") is not None

    # The rollout ends: the freeze is released and the node carries nothing of Kiln's.
    rollout.refresh_from_db()
    canary_services.rollout_abort(actor=ADMIN, rollout=rollout, reason="enough")
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.ABORTED
    assert A_DO_NOT_DISRUPT not in annotations_of(node(cluster, "n-canary"))
    assert A_FROZEN_BY not in annotations_of(node(cluster, "n-canary"))
    row.refresh_from_db()
    assert row.released_at is not None and row.lifted_at is not None
    assert row.release_reason == "rollout aborted"
    assert actions("scheduler:node:n-canary") == [
        "scheduler.node.frozen",
        "scheduler.node.unfrozen",
    ]
    # ... and consolidation may now take it.
    assert ("n-canary", d.UNDERUTILIZED) in nodes_disrupt(backend=cluster, now=later)


@pytest.mark.django_db
def test_a_dead_controllers_freeze_is_reaped_with_its_lease(backend, shop, engineer, settings):
    add_nodes(backend, "n-target", "n-other")
    for i in range(4):
        assert backend.bind_pods([PodBinding("shop", f"web-{i}", "n-target")]) == 1
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    term = fault_lease_acquire(experiment_id=exp.pk, holder="controller-1")
    assert term is not None
    assert is_frozen(node(backend, "n-target")) and not is_frozen(node(backend, "n-other"))
    [row] = DisruptionFreeze.objects.filter(holder_kind="experiment", holder_id=str(exp.pk))
    # The lease is 1 s, the clock skew 0.1 s: a renewal keeps the freeze past a reaper pass
    # half a second after it (timed from the renewal itself, the earlier of the lease's and the
    # freeze's, so a slow machine does not stretch the half second).
    before = row.renewed_at
    assert fault_lease_renew(experiment_id=exp.pk, holder="controller-1", term=term)
    row.refresh_from_db()
    assert row.renewed_at > before  # the renewal reached the freeze
    renewed = ChaosLease.objects.get(experiment_id=exp.pk).renewed_at
    assert renewed <= row.renewed_at
    chaos_reap(backend=backend, now=renewed + timedelta(seconds=0.5))
    assert is_frozen(node(backend, "n-target"))

    # The controller is killed: nothing renews. Once its lease would have lapsed the reaper
    # reverts the fault and thaws the node.
    chaos_reap(backend=backend, now=timezone.now() + timedelta(seconds=5))
    assert not is_frozen(node(backend, "n-target"))
    assert A_FROZEN_BY not in annotations_of(node(backend, "n-target"))
    row.refresh_from_db()
    assert row.release_reason == "holder stopped renewing" and row.lifted_at is not None
    assert "scheduler.node.unfrozen" in actions("scheduler:node:n-target")


@pytest.mark.django_db
def test_a_frozen_node_past_its_hard_expiry_bound_is_disrupted_anyway_and_audited(cluster):
    cluster.apply([nodepool(template={"expireAfter": "1h", "terminationGracePeriod": "30m"})])
    add_nodes(cluster, "n-frozen", "n-plain")
    for n in ("n-frozen", "n-plain"):
        add_pod(cluster, "shop", f"app-{n}", n, {"app": "x"})
    cluster.annotate(
        AppliedRef("v1", "Node", "", "n-frozen"),
        {A_DO_NOT_DISRUPT: "true", A_FROZEN_BY: "experiment/e-1"},
    )
    created = timezone.now()
    # 70 minutes: both expired; the plain one goes, the frozen one is held (grace until 90).
    assert nodes_disrupt(backend=cluster, now=created + timedelta(minutes=70)) == [
        ("n-plain", d.EXPIRED)
    ]
    assert not actions("scheduler:node:n-frozen")
    # 91 minutes: past expireAfter + terminationGracePeriod, the hard bound wins.
    assert nodes_disrupt(backend=cluster, now=created + timedelta(minutes=91)) == [
        ("n-frozen", d.EXPIRED_PAST_GRACE)
    ]
    assert actions("scheduler:node:n-frozen") == [
        "scheduler.node.freeze_overridden",
        "scheduler.node.drained",
    ]
    event = OutboxEvent.objects.get(action="scheduler.node.freeze_overridden")
    assert event.data["frozen_by"] == "experiment/e-1"
    assert (
        event.data["expire_after_seconds"] == 3600
        and event.data["termination_grace_seconds"] == 1800
    )
    assert node(cluster, "n-frozen") is None or node(cluster, "n-frozen")["metadata"].get(
        "deletionTimestamp"
    )


# --- the freeze service ----------------------------------------------------------------------


def holder(**kw) -> Holder:
    values = {
        "kind": "rollout", "id": "r-1", "label": "shop/checkout v1 -> v2", "team": "payments",
        "started_at": timezone.now(), "max_seconds": float("inf"), "lease_seconds": 30.0,
    }  # fmt: skip
    values.update(kw)
    return Holder(**values)


@pytest.mark.django_db
def test_a_freeze_follows_its_pods_and_ends_at_its_hard_bound(cluster, settings):
    add_nodes(cluster, "a", "b")
    h = holder()
    change = disruption_freeze_hold(holder=h, nodes={"a"}, actor=ANALYZER, backend=cluster)
    assert (change.frozen, change.annotated) == (["a"], ["a"])
    # The pods moved to b: b is frozen, a released and cleared, in one call.
    change = disruption_freeze_hold(holder=h, nodes={"b"}, actor=ANALYZER, backend=cluster)
    assert (change.frozen, change.released, change.cleared) == (["b"], ["a"], ["a"])
    assert is_frozen(node(cluster, "b")) and not is_frozen(node(cluster, "a"))
    # Renewing with the same nodes changes nothing and audits nothing.
    before = OutboxEvent.objects.count()
    change = disruption_freeze_hold(holder=h, nodes={"b"}, actor=ANALYZER, backend=cluster)
    assert change.as_dict() == {"frozen": [], "released": [], "annotated": [], "cleared": []}
    assert OutboxEvent.objects.count() == before
    # Past the platform's bound the holder can freeze nothing more.
    settings.KILN_DISRUPTION_FREEZE_MAX_SECONDS = 60
    change = disruption_freeze_hold(
        holder=h, nodes={"b"}, actor=ANALYZER, backend=cluster,
        now=timezone.now() + timedelta(seconds=61),
    )  # fmt: skip
    assert change.released == ["b"] and not is_frozen(node(cluster, "b"))
    assert DisruptionFreeze.objects.get(node="b").release_reason == "hard bound reached"


@pytest.mark.django_db
def test_two_holders_share_a_node_and_the_mark_stays_until_the_last_lets_go(cluster):
    add_nodes(cluster, "a")
    rollout, experiment = holder(), holder(kind="experiment", id="e-1")
    disruption_freeze_hold(holder=rollout, nodes={"a"}, actor=ANALYZER, backend=cluster)
    disruption_freeze_hold(holder=experiment, nodes={"a"}, actor=ANALYZER, backend=cluster)
    assert annotations_of(node(cluster, "a"))[A_FROZEN_BY] == "experiment/e-1,rollout/r-1"
    disruption_freeze_hold(holder=rollout, nodes=set(), actor=ANALYZER, backend=cluster)
    assert annotations_of(node(cluster, "a"))[A_FROZEN_BY] == "experiment/e-1"
    assert is_frozen(node(cluster, "a"))
    assert "scheduler.node.freeze_lifted" in actions("scheduler:node:a")


@pytest.mark.django_db
def test_the_reaper_leaves_a_mark_kiln_did_not_set_and_releases_freezes_of_gone_nodes(cluster):
    add_nodes(cluster, "theirs", "going")
    ref = AppliedRef("v1", "Node", "", "theirs")
    cluster.annotate(ref, {A_DO_NOT_DISRUPT: "true"})  # a person's own mark
    disruption_freeze_hold(holder=holder(), nodes={"going"}, actor=ANALYZER, backend=cluster)
    cluster.delete(AppliedRef("v1", "Node", "", "going"))
    change = disruption_freezes_reap(backend=cluster)
    assert is_frozen(node(cluster, "theirs"))  # not Kiln's to remove
    assert change.cleared == []
    row = DisruptionFreeze.objects.get(node="going")
    assert row.release_reason == "node gone" and row.lifted_at is not None


@pytest.mark.django_db
def test_a_missing_mark_is_put_back_and_only_kilns_jobs_may_freeze(cluster):
    add_nodes(cluster, "a")
    disruption_freeze_hold(holder=holder(), nodes={"a"}, actor=ANALYZER, backend=cluster)
    # Someone (a stale write) took the mark away: the reaper's pass puts it back.
    cluster.annotate(AppliedRef("v1", "Node", "", "a"), {A_DO_NOT_DISRUPT: None, A_FROZEN_BY: None})
    assert disruption_freezes_reap(backend=cluster).annotated == ["a"]
    assert is_frozen(node(cluster, "a"))
    with pytest.raises(Forbidden):
        disruption_freeze_hold(holder=holder(id="r-2"), nodes={"a"}, actor=ADMIN, backend=cluster)
    with pytest.raises(Forbidden):
        disruption_freezes_reap(actor=system_actor("karpenter"), backend=cluster)
    assert DisruptionFreeze.objects.count() == 1


@pytest.mark.django_db
def test_the_canary_beat_renews_follows_moved_pods_and_releases_a_stopped_rollout(cluster):
    from canary.models import Rollout
    from canary.services.freeze import rollouts_freeze_sync

    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", team.slug)
    add_nodes(cluster, "n-1", "n-2")
    add_pod(cluster, "shop", "checkout-v2-0", "n-1", {"version": "v2"})
    service = canary_services.service_create(
        actor=ADMIN, team=team, name="checkout", namespace="shop", sim_traffic_class="steady"
    )
    rollout = canary_services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )
    canary_services.rollout_tick(rollout_id=rollout.pk, tick=0)
    assert is_frozen(node(cluster, "n-1"))
    # The canary pod is rescheduled onto n-2: the beat's pass moves the freeze with it.
    cluster.delete(AppliedRef("v1", "Pod", "shop", "checkout-v2-0"))
    add_pod(cluster, "shop", "checkout-v2-1", "n-2", {"version": "v2"})
    assert rollouts_freeze_sync(backend=cluster) == 1
    assert is_frozen(node(cluster, "n-2")) and not is_frozen(node(cluster, "n-1"))
    # The rollout stops without its own thaw reaching the cluster: the next pass releases it.
    Rollout.objects.filter(pk=rollout.pk).update(status=RolloutStatus.PROMOTED)
    assert rollouts_freeze_sync(backend=cluster) == 1
    assert not is_frozen(node(cluster, "n-2"))
    assert DisruptionFreeze.objects.filter(released_at__isnull=True).count() == 0
    assert rollouts_freeze_sync(backend=cluster) == 0  # nothing left to sync
