"""Following an environment without polling: ETag, If-None-Match and `Prefer: wait`."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from rest_framework.test import APIRequestFactory

from kiln import changes, conditional
from portal.models import Environment

URL = "/api/v1/environments/"


def staging(client) -> tuple[str, str]:
    """A staging request (it waits for approval): its id and the detail's ETag."""
    body = {"team": "payments", "name": "checkout", "env_class": "staging", "ttl_hours": 8}
    created = client.post(URL, {**body, "cpu": 1, "memory_gib": 1}, format="json")
    assert created.status_code == 201, created.json()
    env_id = created.json()["id"]
    detail = client.get(f"{URL}{env_id}/")
    assert detail.status_code == 200 and detail["ETag"].startswith('"')
    # The creation answers the detail's representation, and so its ETag: a client can wait
    # for the first change without reading it once more.
    assert created["ETag"] == detail["ETag"] and created.json() == detail.json()
    return env_id, detail["ETag"]


@pytest.mark.django_db
def test_if_none_match_answers_304_while_the_version_is_current_and_200_once_it_changed(api):
    alice = api("engineer", sub="alice", team="payments")
    env_id, etag = staging(alice)
    unchanged = alice.get(f"{URL}{env_id}/", HTTP_IF_NONE_MATCH=etag)
    assert unchanged.status_code == 304 and unchanged["ETag"] == etag
    assert not unchanged.content and "Preference-Applied" not in unchanged
    other = alice.get(f"{URL}{env_id}/", HTTP_IF_NONE_MATCH='"an-older-version"')
    assert other.status_code == 200 and other["ETag"] == etag

    carol = api("approver", sub="carol", team="payments")
    assert carol.post(f"{URL}{env_id}/approve/", {"reason": "ok"}, format="json").status_code == 200
    changed = alice.get(f"{URL}{env_id}/", HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag
    assert changed.json()["status"] == "APPROVED"


@pytest.mark.django_db
def test_a_wait_with_nothing_changing_ends_in_304_after_the_seconds_asked(api):
    alice = api("engineer", sub="alice", team="payments")
    env_id, etag = staging(alice)
    started = time.monotonic()
    answer = alice.get(f"{URL}{env_id}/", HTTP_IF_NONE_MATCH=etag, HTTP_PREFER="wait=1")
    waited = time.monotonic() - started
    assert answer.status_code == 304 and answer["Preference-Applied"] == "wait=1"
    assert 1.0 <= waited < 3.0


@pytest.mark.django_db(transaction=True)
def test_a_wait_ends_as_soon_as_the_status_change_commits(api, monkeypatch):
    monkeypatch.setattr(changes, "RECHECK_SECONDS", 60.0)  # only the notice can end it in time
    alice = api("engineer", sub="alice", team="payments")
    carol = api("approver", sub="carol", team="payments")
    env_id, etag = staging(alice)

    waiting = threading.Event()
    real_wait = changes.wait_for_change

    def wait_for_change(key: str, **kwargs):
        waiting.set()
        return real_wait(key, **kwargs)

    monkeypatch.setattr(changes, "wait_for_change", wait_for_change)

    def approve_soon() -> None:
        waiting.wait(20)  # alice's request is waiting for a change
        try:
            carol.post(f"{URL}{env_id}/approve/", {"reason": "ok"}, format="json")
        finally:
            connection.close()

    approver = threading.Thread(target=approve_soon)
    started = time.monotonic()
    approver.start()
    answer = alice.get(f"{URL}{env_id}/", HTTP_IF_NONE_MATCH=etag, HTTP_PREFER="wait=20")
    waited = time.monotonic() - started
    approver.join()
    assert answer.status_code == 200 and answer["ETag"] != etag
    assert answer.json()["status"] != "PENDING_APPROVAL"
    assert answer["Preference-Applied"] == "wait=20"
    assert waited < 10  # woken by the notice, not by the 20 s bound


@pytest.mark.django_db
def test_another_teams_environment_is_404_at_once_even_when_asked_to_wait(api):
    alice = api("engineer", sub="alice", team="payments")
    bob = api("engineer", sub="bob", team="search")
    env_id, etag = staging(alice)
    started = time.monotonic()
    answer = bob.get(f"{URL}{env_id}/", HTTP_IF_NONE_MATCH=etag, HTTP_PREFER="wait=20")
    # At once: well inside the wait asked for, with room for a loaded machine's slow request.
    assert answer.status_code == 404 and time.monotonic() - started < 5.0
    assert "ETag" not in answer


@pytest.mark.django_db
@pytest.mark.parametrize(
    "prefer, if_none_match",
    [
        ("wait=abc", None),
        ("wait=-1", None),
        ("wait=0", None),
        ("wait", None),
        ("respond-async", None),
        ("wait=20", "*"),  # names no version to wait for a change from
    ],
)
def test_a_wait_preference_that_cannot_be_honoured_is_ignored(api, prefer, if_none_match):
    alice = api("engineer", sub="alice", team="payments")
    env_id, etag = staging(alice)
    started = time.monotonic()
    answer = alice.get(
        f"{URL}{env_id}/", HTTP_IF_NONE_MATCH=if_none_match or etag, HTTP_PREFER=prefer
    )
    assert answer.status_code == 304 and "Preference-Applied" not in answer
    assert time.monotonic() - started < 5.0  # no wait: a loaded machine's request, not 20 s
    assert Environment.objects.get(public_id=env_id).status == "PENDING_APPROVAL"


@pytest.mark.parametrize(
    "header, seconds",
    [
        ("wait=10", 10),
        ("respond-async, wait=5", 5),
        ("WAIT = 7", 7),
        ("wait=10; foo=bar", 10),
        ("wait=999999", conditional.MAX_WAIT_SECONDS),
        ("wait=1.5", None),
        ("", None),
    ],
)
def test_the_wait_preference_is_read_as_rfc_7240_writes_it(header, seconds):
    from rest_framework.request import Request

    request = Request(APIRequestFactory().get("/", HTTP_PREFER=header))
    assert conditional.preferred_wait(request) == seconds


def test_a_lost_notice_delays_a_waiter_by_at_most_the_recheck_interval():
    flipped_at = time.monotonic() + 0.2
    started = time.monotonic()
    # Nothing publishes: only the periodic re-check can see the change.
    assert changes.wait_for_change(
        "test:lost-notice", seconds=30, changed=lambda: time.monotonic() >= flipped_at
    )
    # One re-check after the flip (about 1 s in); without re-checks the wait would take its 30 s.
    # The 1.5 s beyond is a loaded machine's room.
    assert time.monotonic() - started < 0.2 + changes.RECHECK_SECONDS + 1.5


def test_a_published_notice_wakes_the_waiter_of_its_key_only(monkeypatch):
    monkeypatch.setattr(changes, "RECHECK_SECONDS", 60.0)
    state = {"a": False, "b": False}
    asked = {"a": 0, "b": 0}

    def changed(key: str):
        def ask() -> bool:
            asked[key] += 1
            return state[key]

        return ask

    def change_a() -> None:
        deadline = time.monotonic() + 10
        while not asked["a"] and time.monotonic() < deadline:  # the waiter has looked once
            time.sleep(0.01)
        state["a"] = True
        changes.publish("test:a")

    threading.Thread(target=change_a).start()
    started = time.monotonic()
    assert changes.wait_for_change("test:a", seconds=10, changed=changed("a"))
    assert time.monotonic() - started < 5
    assert not changes.wait_for_change("test:b", seconds=0.3, changed=changed("b"))
    assert asked["b"] == 2  # before waiting and once the seconds ran out: no notice woke it


def test_a_notice_published_through_redis_by_another_process_wakes_the_waiter(
    settings, monkeypatch
):
    import redis

    assert settings.REDIS_URL, "the change notices of the production shape go through Redis"
    monkeypatch.setattr(changes, "RECHECK_SECONDS", 60.0)
    state = {"changed": False}
    asked, woken = threading.Event(), threading.Event()

    def changed() -> bool:
        asked.set()
        return state["changed"]

    def another_process_commits() -> None:
        asked.wait(20)  # the waiter has looked once and found nothing
        state["changed"] = True
        client = redis.Redis.from_url(settings.REDIS_URL)
        # Straight to Redis, as a worker's publish arrives: not through this process's hub; again
        # until the waiter wakes, as the subscriber thread may still be connecting.
        while not woken.is_set():
            client.publish(f"{changes.PREFIX}test:remote", b"")
            woken.wait(0.05)
        client.close()

    publisher = threading.Thread(target=another_process_commits)
    publisher.start()
    started = time.monotonic()
    try:
        assert changes.wait_for_change("test:remote", seconds=20, changed=changed)
    finally:
        woken.set()
        publisher.join(5)
    assert time.monotonic() - started < 10


def test_one_event_listens_to_several_keys_until_each_is_unlistened(settings):
    settings.REDIS_URL = ""  # this process's notices only: no echo through Redis arrives late
    event = threading.Event()
    changes.listen("test:many-a", event)
    changes.listen("test:many-b", event)
    try:
        changes.publish("test:many-b")
        assert event.wait(2)
        event.clear()
        changes.publish("test:many-c")  # a key it does not listen to
        assert not event.wait(0.2)
        changes.unlisten("test:many-b", event)
        changes.publish("test:many-b")
        assert not event.wait(0.2)
        changes.publish("test:many-a")
        assert event.wait(2)
    finally:
        changes.unlisten("test:many-a", event)
        changes.unlisten("test:many-b", event)
