"""Rollout services: the state machine, the analysis loop, traffic shifting and the audit trail."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import jsonschema
import numpy as np
import pytest
import yaml
from django.conf import settings

from audit.models import OutboxEvent
from canary import services
from canary.metrics import simulated_windows
from canary.models import (
    MetricsSource,
    Rollout,
    RolloutDecision,
    RolloutStatus,
    RolloutTick,
    Service,
)
from canary.services import machine, stream
from canary.traffic import ISTIO_API, canary_weight_of, virtual_service
from kiln.cluster.backends import get_backend
from kiln.errors import Conflict, IllegalTransition, InvalidInput
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor, system_actor
from tests.canary.test_ownership_support import own_namespace

pytestmark = pytest.mark.django_db

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
CRDS = Path(settings.BASE_DIR).parent / "shared" / "crds" / "networking.istio.io"


@pytest.fixture
def team() -> Team:
    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", team.slug)
    return team


@pytest.fixture
def service(team):
    return services.service_create(
        actor=ADMIN, team=team, name="checkout", namespace="shop", sim_traffic_class="steady"
    )


def _rollout(service, **kw) -> Rollout:
    kw.setdefault("ticks_per_step", 3)
    return services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", **kw
    )


def _actions(target: Rollout) -> list[str]:
    return list(
        OutboxEvent.objects.filter(target=f"canary.rollout:{target.pk}")
        .order_by("id")
        .values_list("action", flat=True)
    )


def _run(rollout: Rollout, limit: int = 100) -> Rollout:
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    for tick in range(1, limit):
        rollout.refresh_from_db()
        if rollout.status != RolloutStatus.RUNNING:
            break
        services.rollout_tick(rollout_id=rollout.pk, tick=tick)
    rollout.refresh_from_db()
    return rollout


def _route_by_hand(rollout: Rollout, weight: int) -> None:
    """Apply the rollout's VirtualService at `weight` behind Kiln's back (no decision, no intent)."""
    svc = rollout.service
    get_backend().apply(
        [
            virtual_service(
                name=svc.name, namespace=svc.namespace, host=svc.host, canary_weight=weight
            )
        ]
    )


def _schema(kind_file: str) -> dict:
    crd = yaml.safe_load((CRDS / kind_file).read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]


def _live(service, kind: str) -> dict | None:
    return get_backend().get(ISTIO_API, kind, service.namespace, service.name)


def test_start_routes_the_first_step_with_schema_valid_istio_objects(service):
    rollout = _rollout(service)
    assert rollout.status == RolloutStatus.PENDING
    assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    rollout.refresh_from_db()
    assert (rollout.status, rollout.weight) == (RolloutStatus.RUNNING, 5)
    vs = _live(service, "VirtualService")
    dr = _live(service, "DestinationRule")
    assert canary_weight_of(vs) == 5
    assert [s["labels"]["version"] for s in dr["spec"]["subsets"]] == ["v1", "v2"]
    jsonschema.validate(
        {k: v for k, v in vs.items() if k != "status"}, _schema("virtualservices.yaml")
    )
    jsonschema.validate(
        {k: v for k, v in dr.items() if k != "status"}, _schema("destinationrules.yaml")
    )
    assert _actions(rollout) == ["canary.rollout.created", "canary.rollout.started"]


HEALTHY_SEED = 2  # fixed simulated traffic: this healthy canary has the evidence at tick 10


def test_a_healthy_canary_steps_up_and_is_promoted_on_evidence(service):
    rollout = _run(_rollout(service, seed=HEALTHY_SEED))  # steps 5, 25, 50 x 3 ticks
    assert rollout.status == RolloutStatus.PROMOTED
    assert rollout.weight == 100 and 7 <= rollout.ticks_done <= 27
    assert canary_weight_of(_live(service, "VirtualService")) == 100
    weights = list(rollout.ticks.order_by("number").values_list("weight", flat=True))
    # The last step holds while the analysis extends itself past the planned 9 ticks.
    assert weights == [5, 5, 5, 25, 25, 25] + [50] * (rollout.ticks_done - 6)
    kinds = list(rollout.decisions.values_list("kind", flat=True))
    assert kinds == ["started", "step_advanced", "step_advanced", "promoted"]
    actions = _actions(rollout)
    # every tick's decision is on record
    assert actions.count("canary.tick.decided") == rollout.ticks_done
    assert actions[-1] == "canary.rollout.promoted"
    assert "every channel has evidence" in rollout.reason
    last = rollout.ticks.order_by("-number").first().decision
    assert all(c["accepted"] for c in last["channels"].values())
    assert last["llr"] <= last["llr_lower"]


# Fixed simulated traffic, as for the healthy canary: with random traffic a sequential test
# wrongly promotes a regressed canary at some small rate, so a few seeds promote this one and the
# test failed now and then. That rate is canary_bench's to measure (docs/canary.md), over
# thousands of rollouts; this test shows the roll-back path on one.
REGRESSION_SEED = 2


def test_a_canary_with_twice_the_errors_is_rolled_back(service):
    services.service_set_simulated_regression(
        actor=ADMIN, service=service, version="v2", regression="errors"
    )
    rollout = _run(_rollout(service, ticks_per_step=8, seed=REGRESSION_SEED))
    assert rollout.status == RolloutStatus.ROLLED_BACK
    assert rollout.weight == 0
    assert canary_weight_of(_live(service, "VirtualService")) == 0
    last = rollout.decisions.last()
    assert last.kind == "rolled_back" and "error rate" in last.reason
    assert last.statistics["llr"] >= last.statistics["llr_upper"]
    assert _actions(rollout)[-1] == "canary.rollout.rolled_back"
    event = OutboxEvent.objects.filter(action="canary.rollout.rolled_back").get()
    assert event.actor == "system:canary-analyzer"


def test_ticks_are_idempotent_per_number(service):
    rollout = _rollout(service)
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "duplicate"
    assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "continue"
    assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "duplicate"
    assert services.rollout_tick(rollout_id=rollout.pk, tick=5) == "duplicate"  # not its turn
    assert RolloutTick.objects.filter(rollout=rollout).count() == 1
    assert _actions(rollout).count("canary.tick.decided") == 1


def test_tick_decisions_are_traced(service):
    rollout = _rollout(service)
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    services.rollout_tick(rollout_id=rollout.pk, tick=1)
    tick = RolloutTick.objects.get(rollout=rollout, number=1)
    assert len(tick.trace_id) == 32
    event = OutboxEvent.objects.get(action="canary.tick.decided")
    assert event.trace_id == tick.trace_id


def test_simulated_traffic_follows_the_applied_weight(service):
    rollout = _rollout(service)
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    rollout.refresh_from_db()
    baseline, canary, weight = simulated_windows(rollout, 1)
    share = canary.requests / (canary.requests + baseline.requests)
    assert weight == 5 and 0.03 < share < 0.07
    # Shift the VirtualService by hand: the simulated cluster routes by what is applied.
    _route_by_hand(rollout, 50)
    baseline, canary, weight = simulated_windows(rollout, 1)
    assert weight == 50 and 0.45 < canary.requests / (canary.requests + baseline.requests) < 0.55


def test_aborting_a_finished_rollout_is_refused_and_changes_nothing(service):
    rollout = _run(_rollout(service, seed=HEALTHY_SEED))
    events = OutboxEvent.objects.count()
    with pytest.raises(IllegalTransition):
        services.rollout_abort(actor=ADMIN, rollout=rollout)
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.PROMOTED and rollout.weight == 100
    assert OutboxEvent.objects.count() == events


def test_abort_sends_traffic_back_to_the_baseline(service):
    rollout = _rollout(service)
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    services.rollout_abort(actor=ADMIN, rollout=rollout, reason="pager went off")
    rollout.refresh_from_db()
    assert (rollout.status, rollout.weight) == (RolloutStatus.ABORTED, 0)
    assert canary_weight_of(_live(service, "VirtualService")) == 0
    assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "inactive"
    assert _actions(rollout)[-1] == "canary.rollout.aborted"


def test_one_active_rollout_per_service(service):
    _rollout(service)
    with pytest.raises(Conflict):
        _rollout(service)
    assert Rollout.objects.count() == 1


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"steps": [5, 50, 25, 100]}, "steps"),
        ({"steps": [5, 25, 50]}, "steps"),
        ({"steps": [0, 100]}, "steps"),
        ({"ticks_per_step": 0}, "ticks_per_step"),
        ({"tick_seconds": 0.0}, "tick_seconds"),
        ({"config": {"alpha": 0.9}}, "config"),
        ({"config": {"bogus": 1}}, "config"),
    ],
    ids=["unsorted", "no-100", "zero-weight", "no-ticks", "zero-seconds", "alpha", "unknown"],
)
def test_invalid_rollouts_are_refused_and_nothing_is_stored(service, kw, field):
    events = OutboxEvent.objects.count()
    with pytest.raises(InvalidInput) as exc:
        _rollout(service, **kw)
    assert field in exc.value.extra["fields"]
    assert Rollout.objects.count() == 0 and OutboxEvent.objects.count() == events


def test_the_due_sweep_finds_rollouts_whose_tick_is_due(service):
    rollout = _rollout(service)
    assert services.rollouts_tick_due() == 1  # PENDING, due now
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    assert services.rollouts_tick_due() == 0  # next tick in 60 s


def test_seed_shows_one_promotion_and_one_rollback():
    from canary.seed import seed_demo

    Team.objects.create(slug="payments", name="Payments")
    Team.objects.create(slug="search", name="Search")
    created = seed_demo()
    assert any("rollout checkout" in c for c in created)
    assert seed_demo() == []  # idempotent
    # Fixed traffic seeds: the demo shows the same promotion and rollback on every start.
    seeds = {r.service.name: r.seed for r in Rollout.objects.select_related("service")}
    assert seeds == {"checkout": 20261130, "search-api": 20261201}
    outcomes = {}
    for rollout in Rollout.objects.select_related("service"):
        outcomes[rollout.service.name] = _run(rollout).status
    assert outcomes == {"checkout": RolloutStatus.PROMOTED, "search-api": RolloutStatus.ROLLED_BACK}
    assert RolloutDecision.objects.filter(kind="rolled_back").count() == 1
    assert system_actor("seed").username == "system:seed"


def test_seed_gives_a_service_an_interrupted_seed_left_without_a_rollout_its_rollout():
    from canary.seed import seed_demo

    Team.objects.create(slug="payments", name="Payments")
    seed_demo()
    checkout = Rollout.objects.get(service__name="checkout")
    RolloutDecision.objects.filter(rollout=checkout).delete()
    checkout.delete()  # as if the seed stopped between the service and its rollout
    assert seed_demo() == ["rollout checkout v1 -> v2"]
    assert Rollout.objects.get(service__name="checkout").seed == 20261130
    assert Service.objects.filter(name="checkout").count() == 1
    # Somebody else's service of that name, or one on Prometheus, is not the demo's to resume.
    for change in ({"team": Team.objects.create(slug="web", name="Web")},
                   {"metrics_source": MetricsSource.PROMETHEUS}):  # fmt: skip
        Rollout.objects.all().delete()
        Service.objects.filter(name="checkout").update(**change)
        assert seed_demo() == [] and not Rollout.objects.exists()
        Service.objects.filter(name="checkout").update(
            team=Team.objects.get(slug="payments"), metrics_source=MetricsSource.SIMULATED
        )


@pytest.mark.parametrize(
    ("start", "target", "allowed"),
    [
        (RolloutStatus.PENDING, RolloutStatus.RUNNING, True),
        (RolloutStatus.PENDING, RolloutStatus.PROMOTED, False),  # never promoted unanalysed
        (RolloutStatus.RUNNING, RolloutStatus.PROMOTED, True),
        (RolloutStatus.RUNNING, RolloutStatus.ROLLED_BACK, True),
        (RolloutStatus.RUNNING, RolloutStatus.PENDING, False),
        (RolloutStatus.PROMOTED, RolloutStatus.ROLLED_BACK, False),  # terminal
        (RolloutStatus.ROLLED_BACK, RolloutStatus.RUNNING, False),  # terminal
        (RolloutStatus.ABORTED, RolloutStatus.RUNNING, False),  # terminal
    ],
    ids=lambda v: str(v),
)
def test_rollout_state_machine(start, target, allowed):
    rollout = Rollout(status=start)
    if allowed:
        machine.transition(rollout, target)
        assert rollout.status == target
    else:
        with pytest.raises(IllegalTransition):
            machine.transition(rollout, target)
        assert rollout.status == start


def test_manual_promotion_of_a_pending_rollout_is_refused(service):
    rollout = _rollout(service)
    with pytest.raises(IllegalTransition):
        services.rollout_promote(actor=ADMIN, rollout=rollout)
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.PENDING and _actions(rollout) == [
        "canary.rollout.created"
    ]


def test_a_canary_that_never_got_traffic_is_held_inconclusive(service):
    rollout = _rollout(service, steps=[5, 100], ticks_per_step=6)
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    # The VirtualService is changed behind Kiln's back: the canary gets nothing.
    _route_by_hand(rollout, 0)
    rollout = _run(rollout)
    # Windows without canary traffic are no evidence: held for a person, never promoted.
    assert rollout.status == RolloutStatus.INCONCLUSIVE and rollout.finished_at is None
    assert "without traffic" in rollout.reason
    assert _actions(rollout)[-1] == "canary.rollout.inconclusive"
    assert not rollout.decisions.filter(kind="promoted").exists()


def _chaos_fault(service, fault: dict) -> dict:
    """A chaos VirtualService on the service's host, as the chaos actuator applies it."""
    return {
        "apiVersion": ISTIO_API,
        "kind": "VirtualService",
        "metadata": {"name": "chaos-test-1", "namespace": service.namespace},
        "spec": {
            "hosts": [service.host],
            "http": [
                {
                    "name": "kiln-chaos",
                    "fault": fault,
                    "route": [{"destination": {"host": service.host}}],
                }
            ],
        },
    }


def test_an_injected_abort_fault_raises_errors_in_both_arms_of_simulated_traffic(service):
    rollout = _rollout(service)
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    rollout.refresh_from_db()
    clean_b, clean_c, _ = simulated_windows(rollout, 1)
    get_backend().apply(
        [_chaos_fault(service, {"abort": {"httpStatus": 503, "percentage": {"value": 30.0}}})]
    )
    hit_b, hit_c, _ = simulated_windows(rollout, 1)
    # Same tick, same seed: only the fault differs. Each healthy request now fails with
    # probability 0.3, so each arm's failed share rises by about 0.3: with a deviation near 0.009
    # over the baseline's ~2,850 requests, near 0.04 over the canary's ~150. For the canary a
    # bound of +0.2 failed about one run in 245 (once: 30 of 152 drawn); each bound below lies
    # five deviations under the rise, and no fault at all rises by nothing.
    assert (hit_b.requests, hit_c.requests) == (clean_b.requests, clean_c.requests)
    assert hit_b.errors / hit_b.requests > clean_b.errors / clean_b.requests + 0.25
    assert hit_c.errors / hit_c.requests > clean_c.errors / clean_c.requests + 0.1


def test_an_injected_delay_fault_slows_the_delayed_share_of_requests(service):
    # A fixed traffic seed: with a random one the delayed draw leaves the median short of
    # +100 ms for about 4 % of seeds, which would make this test fail now and then.
    rollout = _rollout(service, seed=1)
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    rollout.refresh_from_db()
    clean_b, _, _ = simulated_windows(rollout, 1)
    get_backend().apply(
        [_chaos_fault(service, {"delay": {"fixedDelay": "400ms", "percentage": {"value": 50.0}}})]
    )
    hit_b, _, _ = simulated_windows(rollout, 1)
    # Half the samples gain 400 ms: the median moves up by a large part of it, errors do not change.
    assert hit_b.errors == clean_b.errors
    assert float(np.median(hit_b.latencies_ms)) > float(np.median(clean_b.latencies_ms)) + 100


def test_a_tick_reads_only_the_virtual_services_that_can_route_the_host(service, team):
    from canary.metrics import host_virtual_services

    rollout = _rollout(service)
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    # Neighbours in the same namespace whose hosts only share a prefix are not read...
    for name in ("checkout-2", "checkouts", "cart"):
        neighbour = services.service_create(actor=ADMIN, team=team, name=name, namespace="shop")
        services.rollout_tick(rollout_id=_rollout(neighbour).pk, tick=0)
    # ...but a fault VirtualService naming the host in any form Istio resolves is.
    short = _chaos_fault(service, {"abort": {"httpStatus": 503, "percentage": {"value": 30.0}}})
    short["metadata"]["name"] = "chaos-short"
    short["spec"]["hosts"] = ["Checkout"]
    dotted = _chaos_fault(service, {"abort": {"httpStatus": 503, "percentage": {"value": 30.0}}})
    dotted["metadata"]["name"] = "chaos-dotted"
    dotted["spec"]["hosts"] = ["other.example.com", "checkout.shop"]
    get_backend().apply([short, dotted])
    live, routing = host_virtual_services(get_backend(), "shop", "checkout", service.host)
    assert canary_weight_of(live) == 5 and live["metadata"]["name"] == "checkout"
    assert {vs["metadata"]["name"] for vs in routing} == {"checkout", "chaos-short", "chaos-dotted"}
    # A neighbour's tick reads only its own VirtualService.
    _, others = host_virtual_services(
        get_backend(), "shop", "checkout-2", "checkout-2.shop.svc.cluster.local"
    )
    assert [vs["metadata"]["name"] for vs in others] == ["checkout-2"]


def test_a_tick_and_its_broadcast_read_the_rollout_once(
    service, django_capture_on_commit_callbacks
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    rollout = _rollout(service)
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    with CaptureQueriesContext(connection) as queries:
        with django_capture_on_commit_callbacks(execute=True) as hooks:
            assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "continue"
    assert len(hooks) == 1
    sql = [q["sql"] for q in queries.captured_queries]
    # The locked read is the only read of the rollout: the broadcast is built from rows in hand.
    assert sum(s.startswith('SELECT "canary_rollout"."id"') for s in sql) == 1
    assert sum('FROM "canary_rollouttick"' in s and s.startswith("SELECT") for s in sql) == 1
    assert not any('FROM "portal_team"' in s for s in sql)
    assert len(sql) <= 9, sql  # savepoint, 7 statements, release


def test_the_start_broadcast_reads_no_ticks_and_shows_none(
    service, django_capture_on_commit_callbacks
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    rollout = _rollout(service)
    sent = []
    with mock.patch.object(stream, "broadcast", lambda rid, payload: sent.append(payload)):
        with CaptureQueriesContext(connection) as queries:
            with django_capture_on_commit_callbacks(execute=True):
                assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    sql = [q["sql"] for q in queries.captured_queries]
    assert not any('FROM "canary_rollouttick"' in s for s in sql)
    assert [(p["tick"], [d["kind"] for d in p["decisions"]]) for p in sent] == [(None, ["started"])]
