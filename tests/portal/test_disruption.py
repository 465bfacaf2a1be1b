"""Disruption safety at expiry: workloads are asked over real HTTP, deferrals are bounded, the hard
deadline forces; owners defer with a reason; every deferral and forced disruption audited and counted."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from audit.models import OutboxEvent
from bench.portal.answering_server import AnsweringServer
from kiln.cluster.simulated import SimulatedBackend
from kiln.errors import Forbidden, InvalidInput
from portal import conf
from portal import disruption as d
from portal.lifecycle import Status
from portal.models import Environment
from portal.services import environment_defer_teardown, environments_reap_expired
from portal.services.expiry import DEFERRALS, FORCED
from tests.portal.conftest import request_data

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DEV = d.ClassLifecycle(
    failed_grace=3600, max_deferral=3600, deferral_step=600, warn_before=3600,
    idle_after=None, idle_grace=3600,
)  # fmt: skip


@pytest.mark.parametrize(
    ("answers", "now_s", "verdict", "until_s"),
    [
        # nobody declares anything: go
        ([], 0, d.Verdict.PROCEED, None),
        ([d.Answer("Deployment/a", ready=True)], 0, d.Verdict.PROCEED, None),
        # "not yet" with no Retry-After: one class step (600 s)
        ([d.Answer("Deployment/a", ready=False)], 0, d.Verdict.DEFER, 600),
        # Retry-After 120 s is shorter than the step: 120 s
        ([d.Answer("Deployment/a", ready=False, retry_after=120)], 0, d.Verdict.DEFER, 120),
        # Retry-After 5000 s is capped at the step
        ([d.Answer("Deployment/a", ready=False, retry_after=5000)], 0, d.Verdict.DEFER, 600),
        # 3300 s after expiry a 600 s step would pass the hard deadline (3600): it ends there
        ([d.Answer("Deployment/a", ready=False)], 3300, d.Verdict.DEFER, 3600),
        # at the hard deadline: forced
        ([d.Answer("Deployment/a", ready=False)], 3600, d.Verdict.FORCE, None),
    ],
    ids=[
        "none",
        "ready",
        "step",
        "retry-after",
        "retry-after-capped",
        "capped-by-deadline",
        "force",
    ],
)
def test_decide(answers, now_s, verdict, until_s):
    decision = d.decide(
        now=T0 + timedelta(seconds=now_s), expires_at=T0, answers=answers, lifecycle=DEV
    )
    assert decision.verdict == verdict
    assert decision.hard_deadline == T0 + timedelta(seconds=3600)
    assert decision.until == (None if until_s is None else T0 + timedelta(seconds=until_s))


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, None),
        ({d.DO_NOT_DISRUPT: "nightly load test"}, d.Declaration("Deployment/w", hold_reason="nightly load test")),
        ({d.DO_NOT_DISRUPT: "  "}, d.Declaration("Deployment/w", error=f"{d.DO_NOT_DISRUPT} needs a reason; not honoured")),
        ({d.TERMINATE_CHECK: "/ready", d.TERMINATE_CHECK_PORT: "9000"}, d.Declaration("Deployment/w", check_path="/ready", check_port=9000)),
        ({d.TERMINATE_CHECK: "http://evil/"}, d.Declaration("Deployment/w", error=f"{d.TERMINATE_CHECK} must be an absolute HTTP path")),
        ({d.TERMINATE_CHECK: "/r", d.TERMINATE_CHECK_PORT: "99999"}, d.Declaration("Deployment/w", error=f"{d.TERMINATE_CHECK_PORT} must be a port number")),
    ],
    ids=["nothing", "hold", "hold-without-reason", "check", "check-not-a-path", "bad-port"],
)  # fmt: skip
def test_declarations(annotations, expected):
    obj = {"kind": "Deployment", "metadata": {"name": "w", "annotations": annotations}}
    assert d.declaration_of(obj) == expected


@pytest.fixture
def checks(settings):
    with AnsweringServer() as server:
        settings.KILN_TERMINATE_CHECK_URL = "http://127.0.0.1:{port}{path}"
        yield server


def ready_env(people, capture, **overrides) -> Environment:
    from portal.services import environment_request_submit

    with capture(execute=True):
        env, _ = environment_request_submit(actor=people["alice"], data=request_data(**overrides))
    env.refresh_from_db()
    assert env.status == Status.READY, env.status_reason
    return env


def deploy(env: Environment, name: str, annotations: dict[str, str]) -> None:
    SimulatedBackend().apply(
        [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": env.namespace, "annotations": annotations},
                "spec": {"selector": {"matchLabels": {"app": name}}, "template": {}},
            }
        ]
    )


def actions(env: Environment, action: str) -> list[OutboxEvent]:
    return list(
        OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}", action=action)
    )


def count(counter, *labels) -> float:
    return counter.labels(*labels)._value.get()


def test_reaper_defers_while_the_workload_says_not_yet_then_tears_down_when_it_says_ok(
    people, django_capture_on_commit_callbacks, checks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    path = f"/{env.namespace}/drain"
    checks.script(path, [(503, {"Retry-After": "120"}), 503, 200])
    deploy(env, "loadtest", {d.TERMINATE_CHECK: path, d.TERMINATE_CHECK_PORT: str(checks.port)})
    before = count(DEFERRALS, "dev", "workload")
    t = env.expires_at + timedelta(seconds=1)

    report = environments_reap_expired(now=t, dry_run=False)
    env.refresh_from_db()
    assert report["deferred"] == [env.public_id]
    assert env.status == Status.READY and env.deferrals == 1
    assert env.deferred_until == t + timedelta(seconds=120)  # Retry-After, under the 600 s step
    # Within the deferral the reaper does not ask again.
    assert environments_reap_expired(now=t + timedelta(seconds=60), dry_run=False)["expired"] == []
    assert len(checks.requests[path]) == 1

    environments_reap_expired(now=env.deferred_until, dry_run=False)
    env.refresh_from_db()
    assert env.deferrals == 2 and env.deferred_until == t + timedelta(seconds=720)  # 120 + step

    environments_reap_expired(now=env.deferred_until, dry_run=False)
    env.refresh_from_db()
    assert env.status == Status.EXPIRING  # 200: teardown is queued
    assert len(checks.requests[path]) == 3
    deferred = actions(env, "portal.environment.teardown_deferred")
    assert [e.data["deferrals"] for e in deferred] == [1, 2]
    assert deferred[0].data["answers"][0]["reason"].startswith("503 from http://127.0.0.1:")
    assert actions(env, "portal.environment.disruption_forced") == []
    assert count(DEFERRALS, "dev", "workload") == before + 2


def test_hard_deadline_tears_down_regardless_and_counts_a_forced_disruption(
    people, django_capture_on_commit_callbacks, checks, settings
):
    settings.KILN_LIFECYCLE_CLASSES = {"dev": {"max_deferral": 900, "deferral_step": 600}}
    env = ready_env(people, django_capture_on_commit_callbacks)
    checks.script(f"/{env.namespace}/drain", [503])
    deploy(env, "batch", {d.TERMINATE_CHECK: f"/{env.namespace}/drain", d.TERMINATE_CHECK_PORT: str(checks.port)})  # fmt: skip
    deploy(env, "db-migration", {d.DO_NOT_DISRUPT: "schema migration running"})
    forced_before = count(FORCED, "dev")
    t = env.expires_at
    environments_reap_expired(now=t, dry_run=False)
    environments_reap_expired(now=t + timedelta(seconds=600), dry_run=False)  # capped: 900
    env.refresh_from_db()
    assert env.deferred_until == t + timedelta(seconds=900)
    environments_reap_expired(now=t + timedelta(seconds=900), dry_run=False)
    env.refresh_from_db()
    assert env.status == Status.EXPIRING
    assert env.deferrals == 2
    (forced,) = actions(env, "portal.environment.disruption_forced")
    assert {a["workload"] for a in forced.data["refusing"]} == {
        "Deployment/batch",
        "Deployment/db-migration",
    }
    assert "schema migration running" in {a["reason"] for a in forced.data["refusing"]}
    assert count(FORCED, "dev") == forced_before + 1


def test_do_not_disrupt_without_a_reason_is_not_honoured_and_says_so(
    people, django_capture_on_commit_callbacks, checks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    deploy(env, "w", {d.DO_NOT_DISRUPT: ""})
    environments_reap_expired(now=env.expires_at, dry_run=False)
    env.refresh_from_db()
    assert env.status == Status.EXPIRING and env.deferrals == 0
    (started,) = actions(env, "portal.environment.expiry_started")
    assert "needs a reason" in started.data["answers"][0]["reason"]


def test_owner_defers_with_a_reason_within_the_class_maximum(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)  # dev: at most 240 min
    limit = conf.class_lifecycle("dev").max_deferral
    environment_defer_teardown(
        actor=people["alice"], environment=env, minutes=30, reason="demo at 3"
    )
    assert env.deferred_until == env.expires_at + timedelta(minutes=30)
    (event,) = actions(env, "portal.environment.teardown_deferred")
    assert event.actor == "alice" and event.data["source"] == "owner"
    # The reaper leaves it alone until then, even though it is expired.
    assert environments_reap_expired(now=env.expires_at + timedelta(minutes=29))["expired"] == []
    assert limit == 4 * 3600


def test_a_deferral_is_activity_and_withdraws_an_idle_proposal(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    proposed = timezone.now() - timedelta(hours=1)
    Environment.objects.filter(pk=env.pk).update(idle_proposed_at=proposed, last_activity_at=None)
    environment_defer_teardown(
        actor=people["alice"], environment=env, minutes=30, reason="still testing"
    )
    env.refresh_from_db()
    assert env.idle_proposed_at is None
    assert env.last_activity_at is not None and env.last_activity_at > proposed
    # The workload's "not yet" at expiry is activity too, at the sweep's time.
    deploy(env, "busy", {d.DO_NOT_DISRUPT: "nightly load test"})
    later = env.deferred_until + timedelta(minutes=1)
    Environment.objects.filter(pk=env.pk).update(idle_proposed_at=proposed)
    environments_reap_expired(now=later, dry_run=False)
    env.refresh_from_db()
    assert env.deferrals == 2 and env.idle_proposed_at is None
    assert env.last_activity_at == later


@pytest.mark.parametrize(
    ("minutes", "reason", "field"),
    [(30, "", "reason"), (30, "   ", "reason"), (241, "long test", "minutes"), (0, "x", "minutes")],
    ids=["no-reason", "blank-reason", "past-class-maximum", "zero"],
)
def test_bad_deferrals_are_refused_and_change_nothing(
    people, django_capture_on_commit_callbacks, minutes, reason, field
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    with pytest.raises(InvalidInput) as err:
        environment_defer_teardown(
            actor=people["alice"], environment=env, minutes=minutes, reason=reason
        )
    assert field in err.value.extra["fields"]
    env.refresh_from_db()
    assert env.deferred_until is None and env.deferrals == 0
    assert actions(env, "portal.environment.teardown_deferred") == []


def test_another_team_cannot_defer(people, django_capture_on_commit_callbacks):
    env = ready_env(people, django_capture_on_commit_callbacks)
    with pytest.raises(Forbidden):
        environment_defer_teardown(actor=people["bob"], environment=env, minutes=5, reason="mine")
    env.refresh_from_db()
    assert env.deferrals == 0


def test_defer_api_answers_400_with_reasons_and_200_when_valid(
    people, django_capture_on_commit_callbacks, api_client_for
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    client = api_client_for("engineer", sub="alice", team="payments")
    url = f"/api/v1/environments/{env.public_id}/defer/"
    bad = client.post(url, {"minutes": 10}, format="json")
    assert bad.status_code == 400 and "reason" in bad.json()["extra"]["fields"]
    over = client.post(url, {"minutes": 100000, "reason": "soak"}, format="json")
    assert over.status_code == 400 and "minutes" in over.json()["extra"]["fields"]
    env.refresh_from_db()
    assert env.deferrals == 0
    ok = client.post(url, {"minutes": 10, "reason": "soak test"}, format="json")
    assert ok.status_code == 200, ok.json()
    env.refresh_from_db()
    assert env.deferrals == 1 and env.deferral_reason == "soak test"
    other = api_client_for("engineer", sub="bob", team="search")
    assert other.post(url, {"minutes": 10, "reason": "x"}, format="json").status_code == 404


def test_page_shows_the_countdown_and_the_warning_banner(
    people, django_capture_on_commit_callbacks, client, settings
):
    settings.KILN_LIFECYCLE_CLASSES = {"dev": {"warn_before": 49 * 3600}}
    env = ready_env(people, django_capture_on_commit_callbacks)
    # Past the first half of its life (60 h up, 48 h to go): warned 49 h ahead, not 4 h ahead.
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(
        ready_at=now - timedelta(hours=60), expires_at=now + timedelta(hours=48)
    )
    env.refresh_from_db()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    alice = get_user_model().objects.get(username="alice")
    alice.groups.add(Group.objects.get_or_create(name="engineer")[0])
    client.force_login(alice)
    page = client.get(f"/environments/{env.public_id}/").content.decode()
    assert 'id="expiry"' in page and "Hard deadline" in page and "Expires in" in page
    assert f"/environments/{env.public_id}/defer/" in page
    settings.KILN_LIFECYCLE_CLASSES = {}
    page = client.get(f"/environments/{env.public_id}/").content.decode()
    assert "Expires in" not in page and "Hard deadline" in page
    assert timezone.now() < env.expires_at


def test_the_expiry_warning_starts_its_window_ahead_but_never_in_the_first_half_of_a_life():
    began = T0
    lifecycle = DEV  # warned an hour ahead
    long = d.expiry_warning_at(
        expires_at=began + timedelta(hours=48), began_at=began, lifecycle=lifecycle
    )
    assert long == began + timedelta(hours=47)
    # A TTL no longer than the window: warned from half-way, not from its first minute.
    staging = replace(lifecycle, warn_before=24 * 3600)
    short = d.expiry_warning_at(
        expires_at=began + timedelta(hours=24), began_at=began, lifecycle=staging
    )
    assert short == began + timedelta(hours=12)
    # Unknown start: the window alone.
    assert (
        d.expiry_warning_at(
            expires_at=began + timedelta(hours=24), began_at=None, lifecycle=staging
        )
        == began
    )
