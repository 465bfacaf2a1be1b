"""What sleeps and wakes environments without a person: inactivity, the team's schedule, a kubectl
request to a sleeping control plane; and the TTL and idle proposals that still apply asleep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from audit.models import OutboxEvent
from kiln.cluster import AppliedRef
from kiln.cluster.simulated import SimulatedBackend
from kiln.cluster.simulated_tenant import sleeping_front
from portal.lifecycle import Status, label
from portal.models import Environment
from portal.services import environments_reap_expired
from portal.services.queueing import tasks_held
from portal.services.sleep import sleep_environment, wake_environment
from portal.services.sleep_triggers import environments_sleep_pass, sleep_schedule_set
from tests.portal.test_sleep import ready_env, replicas, run_workloads, served

pytestmark = pytest.mark.django_db
S = Status
OFFICE = [{"days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "19:00"}]
# Wednesday 2026-12-09 in Berlin (CET, UTC+1): 21:00 UTC is 22:00 local, 08:30 UTC is 09:30.
NIGHT = datetime(2026, 12, 9, 21, 0, tzinfo=UTC)
MORNING = datetime(2026, 12, 10, 8, 30, tzinfo=UTC)


def status(env: Environment) -> str:
    return Environment.objects.get(pk=env.pk).status


def test_an_environment_inactive_for_its_class_sleep_after_is_put_to_sleep(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)  # dev: sleeps after 2 h
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(last_activity_at=now - timedelta(minutes=110))
    assert environments_sleep_pass(now=now, dry_run=False)["slept_inactive"] == []
    Environment.objects.filter(pk=env.pk).update(last_activity_at=now - timedelta(hours=3))
    assert environments_sleep_pass(now=now, dry_run=True)["slept_inactive"] == [env.public_id]
    assert status(env) == S.READY  # a dry run changes nothing
    with django_capture_on_commit_callbacks(execute=True):
        environments_sleep_pass(now=now, dry_run=False)
    stored = Environment.objects.get(pk=env.pk)
    assert (stored.status, stored.sleep_trigger) == (S.SLEEPING, "inactivity")
    started = OutboxEvent.objects.get(action="portal.environment.sleep_started")
    assert started.actor == "system:sleeper" and "sleep_after" in started.data["reason"]


def test_the_teams_change_in_its_namespace_is_activity_and_keeps_it_awake(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    Environment.objects.filter(pk=env.pk).update(
        last_activity_at=timezone.now() - timedelta(hours=3)
    )
    run_workloads(env, web=1)  # applied just now by kubectl: the team is at work
    environments_sleep_pass(now=timezone.now() + timedelta(seconds=5), dry_run=False)
    stored = Environment.objects.get(pk=env.pk)
    assert stored.status == S.READY
    assert stored.last_activity_at > timezone.now() - timedelta(minutes=1)


def test_a_prod_environment_never_sleeps_for_inactivity(people, django_capture_on_commit_callbacks):
    env = ready_env(people, django_capture_on_commit_callbacks)
    Environment.objects.filter(pk=env.pk).update(
        env_class="prod", last_activity_at=timezone.now() - timedelta(days=30)
    )
    assert environments_sleep_pass(now=timezone.now(), dry_run=False)["slept_inactive"] == []
    assert status(env) == S.READY


@pytest.fixture
def no_inactivity(settings):
    """Only the schedule acts (dev environments never sleep for inactivity here)."""
    settings.KILN_LIFECYCLE_CLASSES = {"dev": {"sleep_after": None}}


@pytest.mark.usefixtures("no_inactivity")
def test_the_schedule_sleeps_at_night_and_wakes_in_the_morning_only_what_it_slept(
    people, django_capture_on_commit_callbacks
):
    scheduled = ready_env(people, django_capture_on_commit_callbacks, ttl_hours=300)
    mine = ready_env(people, django_capture_on_commit_callbacks, name="mine", ttl_hours=300)
    backend = run_workloads(scheduled, web=2)
    sleep_schedule_set(
        actor=people["alice"],
        team=scheduled.team,
        time_zone="Europe/Berlin",
        wake_windows=OFFICE,
    )
    # Its owner puts `mine` to sleep by hand before the night.
    with django_capture_on_commit_callbacks(execute=True):
        sleep_environment(mine, actor=people["alice"])
    with django_capture_on_commit_callbacks(execute=True):
        report = environments_sleep_pass(now=NIGHT, dry_run=False)
    assert report["schedules"] == ["payments:asleep"]
    assert status(scheduled) == S.SLEEPING and replicas(backend, scheduled, "web") == 0
    # The same night again: nothing changed in what the schedule wants, so nothing happens.
    assert environments_sleep_pass(now=NIGHT + timedelta(hours=1), dry_run=False)["schedules"] == []
    with django_capture_on_commit_callbacks(execute=True):
        report = environments_sleep_pass(now=MORNING, dry_run=False)
    assert report["schedules"] == ["payments:awake"]
    served(scheduled)
    assert status(scheduled) == S.READY and replicas(backend, scheduled, "web") == 2
    assert status(mine) == S.SLEEPING  # put to sleep by a person: stays asleep
    applied = OutboxEvent.objects.filter(action="portal.sleep_schedule.applied").order_by("id")
    assert [e.data["wanted"] for e in applied] == ["asleep", "awake"]


@pytest.mark.usefixtures("no_inactivity")
def test_a_person_who_wakes_it_at_night_keeps_it_awake_until_the_next_change(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks, ttl_hours=300)
    sleep_schedule_set(
        actor=people["alice"], team=env.team, time_zone="Europe/Berlin", wake_windows=OFFICE
    )
    with django_capture_on_commit_callbacks(execute=True):
        environments_sleep_pass(now=NIGHT, dry_run=False)
    with django_capture_on_commit_callbacks(execute=True):
        wake_environment(Environment.objects.get(pk=env.pk), actor=people["alice"])
    environments_sleep_pass(now=NIGHT + timedelta(hours=2), dry_run=False)
    assert status(env) == S.READY


def test_a_sleeping_environment_past_its_ttl_is_torn_down(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        sleep_environment(env, actor=people["alice"])
    Environment.objects.filter(pk=env.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    with tasks_held() as held, django_capture_on_commit_callbacks(execute=True):
        report = environments_reap_expired(dry_run=False)
    assert report["expired_asleep"] == [env.public_id]
    assert status(env) == S.EXPIRING
    assert held == [("portal.teardown_environment", env.pk)]
    expired = OutboxEvent.objects.get(action="portal.environment.expiry_started")
    assert expired.data["from"] == S.SLEEPING and expired.actor == "system:reaper"
    # It reads as the TTL running out, not as a person asking for the teardown.
    assert label(S.EXPIRING, Environment.objects.get(pk=env.pk).status_reason) == "Expired"


def test_an_environment_asleep_longer_than_its_class_allows_is_still_proposed_as_idle(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)  # dev: idle after 48 h
    with django_capture_on_commit_callbacks(execute=True):
        sleep_environment(env, actor=people["alice"])
    Environment.objects.filter(pk=env.pk).update(
        last_activity_at=timezone.now() - timedelta(hours=49)
    )
    environments_reap_expired(dry_run=False)
    stored = Environment.objects.get(pk=env.pk)
    assert stored.status == S.SLEEPING and stored.idle_proposed_at is not None
    assert OutboxEvent.objects.filter(action="portal.environment.idle_proposed").exists()


def test_a_kubectl_request_to_a_sleeping_control_plane_wakes_it(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks, tenant_control_plane=True)
    backend = SimulatedBackend()
    with django_capture_on_commit_callbacks(execute=True):
        sleep_environment(env, actor=people["alice"])
    assert status(env) == S.SLEEPING
    assert backend.tenant(namespace=env.namespace, name=env.namespace) is None  # nothing serves
    # Kiln's own request is not the tenant's: it wakes nothing.
    with django_capture_on_commit_callbacks(execute=True):
        sleeping_front(
            backend,
            env.namespace,
            env.namespace,
            verb="list",
            ref=AppliedRef("v1", "Pod", "default", "web"),
            user={"username": "kubernetes-admin", "groups": ["system:masters"]},
            user_agent="kiln",
        )
    assert status(env) == S.SLEEPING
    with django_capture_on_commit_callbacks(execute=True):
        code = sleeping_front(
            backend,
            env.namespace,
            env.namespace,
            verb="list",
            ref=AppliedRef("v1", "Pod", "default", "web"),
            user={"username": "alice@example.com", "groups": ["system:authenticated"]},
            user_agent="kubectl/v1.33.0",
        )
    assert code == 503
    stored = Environment.objects.get(pk=env.pk)
    assert stored.status == S.READY
    started = OutboxEvent.objects.get(action="portal.environment.wake_started")
    assert started.data["trigger"] == "kubectl" and started.actor == "system:sleeper"
    assert backend.tenant(namespace=env.namespace, name=env.namespace) is not None
