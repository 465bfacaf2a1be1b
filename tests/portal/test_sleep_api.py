"""Sleep and wake over the API and on the environment page, and the teams' schedules: who may,
what a refusal says, and that a refusal changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.urls import reverse

from audit.models import OutboxEvent
from kiln.identity.models import Team
from portal.lifecycle import Status
from portal.models import Environment, SleepSchedule
from tests.portal.conftest import request_data
from tests.portal.test_pages import login

pytestmark = pytest.mark.django_db
OFFICE = [{"days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "19:00"}]


@pytest.fixture
def env(api, django_capture_on_commit_callbacks) -> Environment:
    alice = api("engineer", sub="alice", team="payments")
    with django_capture_on_commit_callbacks(execute=True):
        created = alice.post("/api/v1/environments/", request_data(), format="json")
    assert created.status_code == 201, created.content
    stored = Environment.objects.get(public_id=created.json()["id"])
    assert stored.status == Status.READY
    return stored


def events(env: Environment) -> list[str]:
    return list(
        OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}").values_list(
            "action", flat=True
        )
    )


def test_the_owner_sleeps_and_wakes_it_over_the_api(api, env, django_capture_on_commit_callbacks):
    alice = api("engineer", sub="alice", team="payments")
    with django_capture_on_commit_callbacks(execute=True):
        slept = alice.post(
            f"/api/v1/environments/{env.public_id}/sleep/", {"reason": "lunch"}, format="json"
        )
    assert slept.status_code == 200, slept.content
    assert slept.json()["status"] == Status.SLEEPING
    assert Environment.objects.get(pk=env.pk).slept_at is not None
    with django_capture_on_commit_callbacks(execute=True):
        woke = alice.post(f"/api/v1/environments/{env.public_id}/wake/", {}, format="json")
    assert woke.status_code == 200
    assert Environment.objects.get(pk=env.pk).status == Status.READY
    detail = alice.get(f"/api/v1/environments/{env.public_id}/").json()
    assert detail["sleep"]["trigger"] == "owner" and detail["sleep"]["slept_at"] is None
    assert detail["sleep"]["last_wake_seconds"] is not None
    again = alice.post(f"/api/v1/environments/{env.public_id}/wake/", {}, format="json")
    assert again.status_code == 200 and again.json()["status"] == Status.READY  # awake: no-op


@pytest.mark.parametrize(
    ("roles", "team", "code"),
    [
        (("engineer",), "search", 404),  # another team's environment is not even seen
        (("approver",), "payments", 403),  # sees it, may not act on it
        (("auditor",), None, 403),
    ],
    ids=["other-team", "approver", "auditor"],
)
def test_only_the_owning_team_may_sleep_it(api, env, roles, team, code):
    client = api(*roles, sub="mallory", team=team)
    before = events(env)
    answer = client.post(f"/api/v1/environments/{env.public_id}/sleep/", {}, format="json")
    assert answer.status_code == code
    assert Environment.objects.get(pk=env.pk).status == Status.READY
    assert events(env) == before


def test_a_class_that_may_not_sleep_and_a_teardown_are_409s_naming_the_rule(api, env):
    alice = api("engineer", sub="alice", team="payments")
    Environment.objects.filter(pk=env.pk).update(env_class="prod")
    before = events(env)
    answer = alice.post(f"/api/v1/environments/{env.public_id}/sleep/", {}, format="json")
    assert answer.status_code == 409
    assert answer.json()["code"] == "sleep_forbidden"
    assert answer.json()["extra"]["rule"] == "may_sleep"
    Environment.objects.filter(pk=env.pk).update(env_class="dev", status=Status.TEARING_DOWN)
    answer = alice.post(f"/api/v1/environments/{env.public_id}/wake/", {}, format="json")
    assert answer.status_code == 409
    assert answer.json()["code"] == "illegal_transition"
    assert answer.json()["extra"]["from"] == Status.TEARING_DOWN
    answer = alice.post(f"/api/v1/environments/{env.public_id}/sleep/", {}, format="json")
    assert answer.status_code == 409 and answer.json()["extra"]["rule"] == "ready_only"
    assert events(env) == before


def test_an_unknown_field_is_a_400(api, env):
    alice = api("engineer", sub="alice", team="payments")
    answer = alice.post(
        f"/api/v1/environments/{env.public_id}/sleep/", {"when": "now"}, format="json"
    )
    assert answer.status_code == 400
    assert Environment.objects.get(pk=env.pk).status == Status.READY


# --- schedules ----------------------------------------------------------------------------


def test_the_team_sets_reads_and_removes_its_schedule(api, clock):
    # The coming week, as 168 real hours, holds one awake hour more or less when Berlin changes
    # its clocks inside it: a week with no change.
    clock.current = datetime(2026, 11, 16, 10, 0, tzinfo=UTC)
    alice = api("engineer", sub="alice", team="payments")
    body = {"time_zone": "Europe/Berlin", "wake_windows": OFFICE}
    answer = alice.put("/api/v1/teams/payments/sleep-schedule/", body, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["time_zone"] == "Europe/Berlin"
    # 13 h a day asleep on weekdays, 24 on weekends: (5 x 13 + 2 x 24) / 7 = 16.14 h.
    assert answer.json()["asleep_hours_per_day"] == pytest.approx(16.14, abs=0.01)
    assert alice.get("/api/v1/teams/payments/sleep-schedule/").json()["wake_windows"] == OFFICE
    set_event = OutboxEvent.objects.get(action="portal.sleep_schedule.set")
    assert set_event.target == "kiln.team:payments" and set_event.actor == "alice"
    removed = alice.delete("/api/v1/teams/payments/sleep-schedule/")
    assert removed.status_code == 200 and removed.json()["time_zone"] == "Europe/Berlin"
    assert not SleepSchedule.objects.exists()
    assert alice.get("/api/v1/teams/payments/sleep-schedule/").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"time_zone": "Europe/Atlantis", "wake_windows": OFFICE}, "time_zone"),
        ({"time_zone": "Europe/Berlin", "wake_windows": []}, "wake_windows"),
        ({"time_zone": "Europe/Berlin"}, "wake_windows"),
        ({"time_zone": "Europe/Berlin", "wake_windows": [{"days": ["mon"], "start": "25:00", "end": "01:00"}]}, "wake_windows"),
        ({"time_zone": "Europe/Berlin", "wake_windows": OFFICE, "nights": True}, "nights"),
        ({"time_zone": 1, "wake_windows": OFFICE}, "time_zone"),
    ],
    ids=["unknown-zone", "no-waking-window", "missing-windows", "bad-time", "unknown-field", "zone-not-a-string"],
)  # fmt: skip
def test_a_schedule_it_cannot_read_is_a_400_naming_the_field_and_nothing_is_stored(
    api, body, field
):
    alice = api("engineer", sub="alice", team="payments")
    answer = alice.put("/api/v1/teams/payments/sleep-schedule/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["extra"]["fields"]
    assert not SleepSchedule.objects.exists()
    assert not OutboxEvent.objects.filter(action="portal.sleep_schedule.set").exists()


def test_another_team_cannot_read_or_set_the_schedule(api):
    alice = api("engineer", sub="alice", team="payments")
    alice.put(
        "/api/v1/teams/payments/sleep-schedule/",
        {"time_zone": "UTC", "wake_windows": OFFICE},
        format="json",
    )
    bob = api("engineer", sub="bob", team="search")
    assert bob.get("/api/v1/teams/payments/sleep-schedule/").status_code == 404
    answer = bob.put(
        "/api/v1/teams/payments/sleep-schedule/",
        {"time_zone": "Asia/Tokyo", "wake_windows": OFFICE},
        format="json",
    )
    assert answer.status_code == 404
    assert SleepSchedule.objects.get().time_zone == "UTC"
    approver = api("approver", sub="carol", team="payments")
    assert approver.get("/api/v1/teams/payments/sleep-schedule/").status_code == 200
    denied = approver.delete("/api/v1/teams/payments/sleep-schedule/")
    assert denied.status_code == 403 and SleepSchedule.objects.exists()


# --- the page -------------------------------------------------------------------------------


def test_the_page_shows_the_savings_and_the_buttons_with_the_state(
    django_capture_on_commit_callbacks,
):
    team = Team.objects.create(slug="payments", name="Payments")
    alice = login("alice", "engineer", team)
    form = {**request_data(), "ttl_hours": "48", "cpu": "8", "memory_gib": "32", "database": "on"}
    form = {k: v for k, v in form.items() if v is not False}
    with django_capture_on_commit_callbacks(execute=True):
        alice.post(reverse("portal:environment-request"), form)
    env = Environment.objects.get()
    page = alice.get(reverse("portal:environment-detail", args=[env.public_id])).content.decode()
    assert 'id="sleep"' in page and "Put it to sleep" in page
    # Two m6i.xlarge on demand at $0.2140 saved, the small database ($0.0360) kept:
    # $0.4280 an hour, $10.27 a day asleep.
    assert "$10.27 a day" in page and "PostgreSQL (small) is kept" in page
    with django_capture_on_commit_callbacks(execute=True):
        alice.post(reverse("portal:environment-sleep", args=[env.public_id]))
    assert Environment.objects.get().status == Status.SLEEPING
    page = alice.get(reverse("portal:environment-detail", args=[env.public_id])).content.decode()
    assert "Asleep" in page and "Wake it" in page and "Put it to sleep" not in page
    # No tenant control plane here: the card speaks of what this one has, and how to extend it.
    assert "Its workloads and nodes are at zero" in page and "wake it to extend it" in page
    # Asked for by a person, who may be a platform admin from no team: not "by its team".
    assert "put to sleep on request" in page and "by its team" not in page
    # While it is still falling asleep, the card does not say it is there yet.
    slept_at = Environment.objects.get().slept_at
    Environment.objects.filter(pk=env.pk).update(slept_at=None)
    page = alice.get(reverse("portal:environment-detail", args=[env.public_id])).content.decode()
    assert "Falling asleep" in page and "Wake once asleep" in page
    assert "nodes are being brought to zero" in page and "are at zero" not in page
    Environment.objects.filter(pk=env.pk).update(slept_at=slept_at)
    slept = OutboxEvent.objects.get(action="portal.environment.sleep_started")
    assert slept.data["reason"] == "asked for on the environment's page"
    other = login("bob", "engineer", Team.objects.create(slug="search", name="Search"))
    assert other.post(reverse("portal:environment-wake", args=[env.public_id])).status_code == 404
    approver = login("carol", "approver", team)
    page = approver.get(reverse("portal:environment-detail", args=[env.public_id])).content.decode()
    assert "Asleep" in page and "Wake it" not in page
    approver.post(reverse("portal:environment-wake", args=[env.public_id]))
    assert Environment.objects.get().status == Status.SLEEPING
    with django_capture_on_commit_callbacks(execute=True):
        woke = alice.post(reverse("portal:environment-wake", args=[env.public_id]), follow=True)
    assert Environment.objects.get().status == Status.READY
    assert "Waking: everything comes back as it was." in woke.content.decode()
    again = alice.post(reverse("portal:environment-wake", args=[env.public_id]), follow=True)
    assert "It is awake already: nothing to do." in again.content.decode()
    kept = alice.post(reverse("portal:environment-keep", args=[env.public_id]), follow=True)
    assert "it was not proposed for early teardown" in kept.content.decode()
