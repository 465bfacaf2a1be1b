"""An inconclusive rollout holds its weight until a person promotes anyway, aborts, retries or extends."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from audit.models import OutboxEvent
from canary import services
from canary.models import MetricsSource, Observation, Rollout, RolloutStatus
from kiln.errors import Forbidden, IllegalTransition, InvalidInput
from kiln.identity.models import Team
from kiln.identity.permissions import APPROVER, AUDITOR, ENGINEER, PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace

pytestmark = pytest.mark.django_db

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
ALICE = Actor("alice", roles=frozenset({ENGINEER}), teams=frozenset({"payments"}))
CAROL = Actor("carol", roles=frozenset({APPROVER}), teams=frozenset({"payments"}))
DAVE = Actor("dave", roles=frozenset({AUDITOR}))


@pytest.fixture
def service():
    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", "payments")
    return services.service_create(
        actor=ADMIN, team=team, name="checkout", namespace="shop", sim_traffic_class="low_traffic"
    )


def _events(rollout: Rollout) -> list[OutboxEvent]:
    return list(OutboxEvent.objects.filter(target=f"canary.rollout:{rollout.pk}").order_by("id"))


def _inconclusive(service) -> Rollout:
    """Low traffic and a max duration of the planned 4 ticks: no channel can be accepted in time."""
    rollout = services.rollout_create(
        actor=ALICE,
        service=service,
        baseline_version="v1",
        canary_version="v2",
        steps=[10, 100],
        ticks_per_step=4,
        config={"max_ticks": 4},
        seed=3,
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    for tick in range(1, 5):
        services.rollout_tick(rollout_id=rollout.pk, tick=tick)
    rollout.refresh_from_db()
    return rollout


def test_undecided_at_max_duration_the_rollout_holds_its_weight_and_waits(service):
    rollout = _inconclusive(service)
    assert rollout.status == RolloutStatus.INCONCLUSIVE
    assert rollout.weight == 10 and rollout.finished_at is None and rollout.next_tick_at is None
    assert "max duration" in rollout.reason and "more canary requests" in rollout.reason
    # The sample-size estimate is on the rollout, the decision and the audit event.
    assert rollout.analysis["requests_needed"] > 0 and rollout.analysis["minutes_needed"] > 0
    decision = rollout.decisions.get(kind="inconclusive")
    assert decision.to_weight == decision.from_weight == 10
    assert decision.statistics["requests_needed"] == rollout.analysis["requests_needed"]
    event = _events(rollout)[-1]
    assert event.action == "canary.rollout.inconclusive"
    assert event.data["statistics"]["requests_needed"] == rollout.analysis["requests_needed"]
    assert set(event.data["statistics"]["channels"]) == {"errors", "median", "tail"}
    # Nothing ticks any more: a late task is a no-op.
    assert services.rollout_tick(rollout_id=rollout.pk, tick=5) == "inactive"
    # And the service stays taken: no second rollout while one holds traffic.
    with pytest.raises(Exception, match="active rollout"):
        services.rollout_create(
            actor=ALICE, service=service, baseline_version="v1", canary_version="v3"
        )


def test_extend_keeps_the_evidence_and_adds_ticks(service):
    rollout = _inconclusive(service)
    before = _events(rollout)
    with pytest.raises(InvalidInput) as exc:
        services.rollout_extend(actor=ALICE, rollout=rollout, reason="  ")
    assert "reason" in exc.value.extra["fields"] and _events(rollout) == before
    rollout = services.rollout_extend(
        actor=ALICE, rollout=rollout, reason="Friday traffic", ticks=6
    )
    assert rollout.status == RolloutStatus.RUNNING and rollout.extra_ticks == 6
    assert services.analysis_config(rollout).max_ticks == 10
    event = _events(rollout)[-1]
    assert event.action == "canary.rollout.extended" and event.actor == "alice"
    assert "Friday traffic" in event.data["reason"] and event.data["statistics"]["max_ticks"] == 10
    # The analysis goes on from tick 5 with ticks 1-4 still its evidence.
    assert services.rollout_tick(rollout_id=rollout.pk, tick=5) in ("continue", "inconclusive")
    tick5 = rollout.ticks.get(number=5).decision
    assert tick5["tick"] == 5 and tick5["max_ticks"] == 10


def test_retry_restarts_the_analysis_from_the_first_step(service):
    rollout = _inconclusive(service)
    rollout = services.rollout_retry(actor=ALICE, rollout=rollout, reason="metrics fixed")
    assert rollout.status == RolloutStatus.RUNNING
    assert rollout.analysis_start == 4 and rollout.weight == 10 and rollout.analysis == {}
    assert _events(rollout)[-1].action == "canary.rollout.retried"
    services.rollout_tick(rollout_id=rollout.pk, tick=5)
    # A fresh analysis: tick 5 is its first tick (a warm-up tick, not yet evidence).
    assert rollout.ticks.get(number=5).decision["tick"] == 1


def test_promote_anyway_is_for_approvers_and_needs_a_reason(service):
    rollout = _inconclusive(service)
    before = _events(rollout)
    with pytest.raises(Forbidden):
        services.rollout_promote(actor=ALICE, rollout=rollout, reason="ship it")
    with pytest.raises(InvalidInput):
        services.rollout_promote(actor=CAROL, rollout=rollout, reason="")
    assert _events(rollout) == before
    rollout = services.rollout_promote(actor=CAROL, rollout=rollout, reason="known-good build")
    assert rollout.status == RolloutStatus.PROMOTED and rollout.weight == 100
    assert rollout.finished_at is not None and rollout.is_finished
    event = _events(rollout)[-1]
    assert event.action == "canary.rollout.promoted" and event.actor == "carol"
    assert event.data["reason"] == "known-good build"
    # The statistics the person overrode are on record with the promotion.
    assert event.data["statistics"]["requests_needed"] == rollout.analysis["requests_needed"]


def test_abort_sends_an_inconclusive_rollout_back_to_the_baseline(service):
    rollout = _inconclusive(service)
    rollout = services.rollout_abort(actor=ALICE, rollout=rollout, reason="not worth the wait")
    assert rollout.status == RolloutStatus.ABORTED and rollout.weight == 0 and rollout.is_finished
    with pytest.raises(IllegalTransition):
        services.rollout_extend(actor=ALICE, rollout=rollout, reason="too late")


@pytest.mark.parametrize("who", [DAVE, CAROL], ids=["auditor", "approver-not-of-team"])
def test_only_the_team_retries_or_extends(service, who):
    rollout = _inconclusive(service)
    before = _events(rollout)
    with pytest.raises(Forbidden):
        services.rollout_extend(actor=who, rollout=rollout, reason="x")
    with pytest.raises(Forbidden):
        services.rollout_retry(actor=who, rollout=rollout, reason="x")
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.INCONCLUSIVE and _events(rollout) == before


def test_running_rollouts_cannot_be_retried_or_extended(service):
    rollout = services.rollout_create(
        actor=ALICE, service=service, baseline_version="v1", canary_version="v2"
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    with pytest.raises(IllegalTransition):
        services.rollout_retry(actor=ALICE, rollout=rollout, reason="x")


@pytest.fixture
def push_rollout():
    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", "payments")
    svc = services.service_create(
        actor=ADMIN, team=team, name="ledger", namespace="shop", metrics_source=MetricsSource.PUSH
    )
    rollout = services.rollout_create(
        actor=ALICE, service=svc, baseline_version="v1", canary_version="v2"
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    return rollout


def test_more_latency_samples_than_requests_are_refused(push_rollout):
    with pytest.raises(InvalidInput) as exc:
        services.observation_push(
            actor=ALICE,
            rollout=push_rollout,
            arm="canary",
            requests=2,
            errors=0,
            latencies_ms=[10.0, 11.0, 12.0],
        )
    assert "latencies_ms" in exc.value.extra["fields"] and Observation.objects.count() == 0


def test_out_of_order_observations_are_refused_and_nothing_is_recorded(push_rollout):
    now = timezone.now()
    services.observation_push(
        actor=ALICE, rollout=push_rollout, arm="canary", requests=5, errors=0, observed_at=now
    )
    events = OutboxEvent.objects.count()
    earlier = push_rollout.created_at + (now - push_rollout.created_at) / 2  # after it began
    for when in (now, earlier):
        with pytest.raises(InvalidInput) as exc:
            services.observation_push(
                actor=ALICE,
                rollout=push_rollout,
                arm="canary",
                requests=5,
                errors=0,
                observed_at=when,
            )
        assert "the canary arm's last window" in exc.value.extra["fields"]["observed_at"][0]
    assert Observation.objects.count() == 1 and OutboxEvent.objects.count() == events
    # The other arm keeps its own order.
    services.observation_push(
        actor=ALICE, rollout=push_rollout, arm="baseline", requests=5, errors=0, observed_at=now
    )
    assert Observation.objects.count() == 2


def test_a_window_that_ended_before_the_rollout_began_is_refused(push_rollout):
    """It measured traffic of neither arm; stored, it used to be analysed as the first window."""
    for when in (push_rollout.created_at, datetime(1970, 1, 1, tzinfo=UTC)):
        with pytest.raises(InvalidInput) as exc:
            services.observation_push(
                actor=ALICE, rollout=push_rollout, arm="canary", requests=5, errors=0,
                observed_at=when,
            )  # fmt: skip
        assert "after the rollout began" in exc.value.extra["fields"]["observed_at"][0]
    assert Observation.objects.count() == 0


# --- over the API ------------------------------------------------------------------------


@pytest.fixture
def alice_api(api_client_for):
    return api_client_for("engineer", sub="alice", team="payments")


def test_the_api_extends_with_a_reason_and_shows_the_sample_size(service, alice_api):
    rollout = _inconclusive(service)
    url = f"/api/v1/rollouts/{rollout.pk}/"
    summary = alice_api.get(url).json()["rollout"]
    assert summary["status"] == "inconclusive" and summary["finished"] is False
    assert summary["requests_needed"] == rollout.analysis["requests_needed"] > 0
    response = alice_api.post(url + "extend/", {}, format="json")
    assert response.status_code == 400 and "reason" in response.json()["extra"]["fields"]
    response = alice_api.post(url + "extend/", {"reason": "more traffic at noon"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "running"
    rollout.refresh_from_db()
    assert rollout.extra_ticks == 4  # by default: the planned ticks once more


def test_the_api_refuses_promote_anyway_from_an_engineer(service, alice_api):
    rollout = _inconclusive(service)
    response = alice_api.post(
        f"/api/v1/rollouts/{rollout.pk}/promote/", {"reason": "ship"}, format="json"
    )
    assert response.status_code == 403
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.INCONCLUSIVE


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"alpha": 0.9}, "config.alpha"),
        ({"beta": 0}, "config.beta"),
        ({"error_ratio": 1}, "config.error_ratio"),
        ({"tail_ratio": 0.5}, "config.tail_ratio"),
        ({"warmup_ticks": 2, "max_ticks": 1}, "config.max_ticks"),
    ],
    ids=["alpha", "beta-zero", "errors-x1", "tail-below-1", "max-below-warmup"],
)
def test_impossible_analysis_settings_are_a_400_naming_the_field(service, alice_api, config, field):
    body = {
        "service": str(service.pk),
        "baseline_version": "v1",
        "canary_version": "v2",
        "config": config,
    }
    response = alice_api.post("/api/v1/rollouts/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]
    assert Rollout.objects.count() == 0
