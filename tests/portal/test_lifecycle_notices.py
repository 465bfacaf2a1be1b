"""Warnings before expiry, idle proposals, keeping, team webhooks (real HTTP, retried) and the
FAILED environment's way out after its class's grace period."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from audit.models import OutboxEvent
from bench.portal.answering_server import AnsweringServer
from kiln.cluster.models import SimulatedObject
from kiln.cluster.simulated_failures import inject_failure
from kiln.errors import Forbidden, IllegalTransition, InvalidInput
from portal.lifecycle import Status
from portal.models import Environment, Notification, TeamWebhook
from portal.services import (
    environment_keep,
    environment_provision,
    environment_request_submit,
    environment_teardown,
    environments_reap_expired,
)
from portal.services.notices import team_webhook_set
from portal.services.provisioning import environment_mark_failed
from tests.portal.conftest import drain_audit, request_data

pytestmark = pytest.mark.django_db


def ready_env(people, capture, **overrides) -> Environment:
    with capture(execute=True):
        env, _ = environment_request_submit(actor=people["alice"], data=request_data(**overrides))
    env.refresh_from_db()
    assert env.status == Status.READY, env.status_reason
    return env


def actions(env: Environment, action: str) -> list[OutboxEvent]:
    return list(
        OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}", action=action)
    )


@pytest.fixture
def hook(people, teams):
    with AnsweringServer() as server:
        team_webhook_set(
            actor=people["root"], team_id=teams["payments"].pk, url=server.url("/chat")
        )
        yield server


def test_expiry_warning_is_posted_to_the_team_webhook_with_retries(
    people, django_capture_on_commit_callbacks, hook
):
    hook.script("/chat", [500, 503, 200])
    env = ready_env(people, django_capture_on_commit_callbacks)  # dev: warned 4 h ahead
    soon = env.expires_at - timedelta(hours=3)
    assert environments_reap_expired(now=soon)["warned"] == [env.public_id]  # dry run
    assert Notification.objects.count() == 0
    with django_capture_on_commit_callbacks(execute=True):
        environments_reap_expired(now=soon, dry_run=False)
        environments_reap_expired(now=soon + timedelta(minutes=5), dry_run=False)  # once only
    note = Notification.objects.get()
    assert note.status == Notification.SENT and note.attempts == 3  # two failures, then 200
    assert len(hook.requests["/chat"]) == 3
    body = json.loads(hook.requests["/chat"][-1])
    assert body["kind"] == "expiry_warning" and body["environment"] == env.public_id
    assert env.namespace in body["text"]
    assert len(actions(env, "portal.environment.expiry_warned")) == 1
    assert len(actions(env, "portal.notification.sent")) == 1


def test_a_webhook_that_never_answers_ok_is_marked_failed_after_the_retries(
    people, django_capture_on_commit_callbacks, hook
):
    hook.script("/chat", [500])
    env = ready_env(people, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        environments_reap_expired(now=env.expires_at - timedelta(hours=1), dry_run=False)
    note = Notification.objects.get()
    assert (
        note.status == Notification.FAILED and note.attempts == 6 and note.last_error == "HTTP 500"
    )
    assert len(actions(env, "portal.notification.failed")) == 1


def test_a_webhook_url_that_is_not_http_is_refused(people, teams):
    for url in ("file:///etc/passwd", "not a url", "ftp://chat.example/hook"):
        with pytest.raises(InvalidInput) as err:
            team_webhook_set(actor=people["root"], team_id=teams["payments"].pk, url=url)
        assert "url" in err.value.extra["fields"]
    assert TeamWebhook.objects.count() == 0
    assert not OutboxEvent.objects.filter(action="portal.team_webhook.set").exists()


@pytest.mark.parametrize(
    ("url", "allow_private", "words"),
    [
        ("http://169.254.169.254/latest/meta-data/", True, "is link-local"),
        ("http://[fe80::1]:8080/hook", True, "is link-local"),
        ("http://[::ffff:169.254.169.254]/", True, "(that is 169.254.169.254) is link-local"),
        ("http://0.0.0.0:80/", True, "is not an address to call"),
        ("http://224.0.0.1/", True, "is not an address to call"),
        ("http:///hook", True, "names no host"),
        ("http://127.0.0.1:8000/api/v1/", False, "private networks are not allowed"),
        ("http://10.0.0.5/hook", False, "private networks are not allowed"),
    ],
)
def test_a_webhook_at_an_address_kiln_does_not_call_is_refused_when_set(
    people, teams, settings, url, allow_private, words
):
    settings.KILN_WEBHOOK_ALLOW_PRIVATE = allow_private
    with pytest.raises(InvalidInput) as err:
        team_webhook_set(actor=people["root"], team_id=teams["payments"].pk, url=url)
    assert words in err.value.extra["fields"]["url"][0]
    assert TeamWebhook.objects.count() == 0


def test_a_webhook_whose_name_leads_to_a_refused_address_fails_at_once_and_is_never_asked(
    people, teams, settings, django_capture_on_commit_callbacks
):
    with AnsweringServer() as server:
        server.script("/chat", [200])
        # A name, not an address: only the connection can tell where it leads (here loopback).
        url = server.url("/chat").replace("127.0.0.1", "localhost")
        team_webhook_set(actor=people["root"], team_id=teams["payments"].pk, url=url)
        env = ready_env(people, django_capture_on_commit_callbacks)
        settings.KILN_WEBHOOK_ALLOW_PRIVATE = False  # the chat is outside: private is refused
        with django_capture_on_commit_callbacks(execute=True):
            environments_reap_expired(now=env.expires_at - timedelta(hours=1), dry_run=False)
        note = Notification.objects.get()
        assert note.status == Notification.FAILED and note.attempts == 1  # not retried
        assert re.match(
            r"refused: (127.0.0.1|::1) is a loopback or private address", note.last_error
        )
        assert server.requests["/chat"] == []


def test_a_webhook_that_redirects_is_not_followed(people, django_capture_on_commit_callbacks, hook):
    hook.script("/chat", [(302, {"Location": hook.url("/elsewhere")})])
    hook.script("/elsewhere", [200])
    env = ready_env(people, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        environments_reap_expired(now=env.expires_at - timedelta(hours=1), dry_run=False)
    note = Notification.objects.get()
    assert note.status == Notification.FAILED and note.last_error == "HTTP 302"
    assert hook.requests["/elsewhere"] == []


def test_idle_environment_is_proposed_the_owner_keeps_it(
    people, django_capture_on_commit_callbacks, hook
):
    hook.script("/chat", [200])
    env = ready_env(people, django_capture_on_commit_callbacks)  # dev: idle after 48 h
    later = env.ready_at + timedelta(hours=47)
    # Not idle yet (and the TTL is 48 h, so the warning would fire: keep it out of the way).
    Environment.objects.filter(pk=env.pk).update(expires_at=env.ready_at + timedelta(days=10))
    assert environments_reap_expired(now=later)["idle_proposed"] == []
    with django_capture_on_commit_callbacks(execute=True):
        report = environments_reap_expired(now=later + timedelta(hours=2), dry_run=False)
    assert report["idle_proposed"] == [env.public_id]
    env.refresh_from_db()
    assert env.idle_proposed_at is not None
    (note,) = Notification.objects.filter(kind="idle_proposed")
    assert note.status == Notification.SENT
    with pytest.raises(Forbidden):
        environment_keep(actor=people["bob"], environment=env)
    environment_keep(actor=people["alice"], environment=env)
    assert env.idle_proposed_at is None and env.last_activity_at is not None
    (kept,) = actions(env, "portal.environment.kept")
    assert kept.actor == "alice"
    # Kept: the grace lapsing later does not bring the expiry forward.
    environments_reap_expired(now=later + timedelta(hours=30), dry_run=False)
    env.refresh_from_db()
    assert env.expires_at == env.ready_at + timedelta(days=10)


def test_idle_environment_not_kept_expires_early_through_the_ordinary_expiry(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks, env_class="ephemeral", ttl_hours=72)
    t = env.ready_at + timedelta(hours=13)  # ephemeral: idle after 12 h, grace 2 h
    environments_reap_expired(now=t, dry_run=False)
    environments_reap_expired(now=t + timedelta(hours=2), dry_run=False)
    env.refresh_from_db()
    assert env.expires_at == t + timedelta(hours=2)
    assert len(actions(env, "portal.environment.idle_expired")) == 1
    environments_reap_expired(now=t + timedelta(hours=2, seconds=1), dry_run=False)
    env.refresh_from_db()
    assert env.status == Status.EXPIRING


def test_prod_is_never_proposed_as_idle(people, django_capture_on_commit_callbacks):
    env = ready_env(people, django_capture_on_commit_callbacks)
    Environment.objects.filter(pk=env.pk).update(
        env_class="prod", expires_at=env.ready_at + timedelta(days=300)
    )
    report = environments_reap_expired(now=env.ready_at + timedelta(days=200))
    assert report["idle_proposed"] == []


def test_keep_only_when_ready(people, django_capture_on_commit_callbacks):
    env = ready_env(people, django_capture_on_commit_callbacks)
    environment_mark_failed(environment_id=env.pk, reason="node lost")
    env.refresh_from_db()
    with pytest.raises(IllegalTransition):
        environment_keep(actor=people["alice"], environment=env)


def test_half_provisioned_failed_environment_is_torn_down_after_its_grace_with_nothing_left(
    people, django_capture_on_commit_callbacks
):
    # The apply dies after the Namespace, quota and limits; delivery gives up: FAILED.
    inject_failure("apply_error", kind="NetworkPolicy")
    env, _ = environment_request_submit(actor=people["alice"], data=request_data(database=True))
    with pytest.raises(Exception):  # noqa: B017 - the backend's DeliveryError
        environment_provision(environment_id=env.pk)
    environment_mark_failed(environment_id=env.pk, reason="delivery failed", step="apply")
    env.refresh_from_db()
    assert env.status == Status.FAILED
    left = SimulatedObject.objects.filter(namespace__in=["", env.namespace])
    assert left.count() == 3  # Namespace, ResourceQuota, LimitRange
    report = environments_reap_expired(now=env.updated_at + timedelta(minutes=59), dry_run=False)
    assert report["failed_torn_down"] == []  # dev: 1 h grace
    environments_reap_expired(now=env.updated_at + timedelta(hours=1), dry_run=False)
    env.refresh_from_db()
    assert env.status == Status.TEARING_DOWN
    (started,) = actions(env, "portal.environment.teardown_started")
    assert started.actor == "system:reaper" and started.data["failed_reason"] == "delivery failed"
    environment_teardown(environment_id=env.pk)
    drain_audit()
    assert environment_teardown(environment_id=env.pk) == "deleted"
    assert left.count() == 0


def test_quarantined_environments_are_not_torn_down_automatically(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    Environment.objects.filter(pk=env.pk).update(status=Status.QUARANTINED)
    report = environments_reap_expired(now=env.updated_at + timedelta(days=30), dry_run=False)
    assert report["failed_torn_down"] == []
