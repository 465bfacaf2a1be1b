"""Telling people before Kiln acts: expiry warnings, idle proposals and the team webhook that carries them.

- Ahead of expiry (the class's `warn_before`) a READY environment is warned once:
  `portal.environment.expiry_warned`, a page banner, and a post to the team's webhook.
- With no activity for the class's `idle_after` it is proposed for early teardown
  (`portal.environment.idle_proposed`); the owner keeps it (`portal.environment.kept`,
  `environment_keep` in portal/services/expiry.py beside the other expiry verbs) or,
  after `idle_grace`, its expiry is brought forward to now (`portal.environment.idle_expired`)
  and the reaper's ordinary expiry (with its disruption checks) takes it.
- Activity is what Kiln sees (becoming READY, an extension, a deferral, a keep), the
  tenant's own requests inside its control plane, as its audit sink archives them
  (`portal.services.tenant_audit`), and, for every environment, the team's own changes to the
  objects in its namespace (`metadata.managedFields`, read before an environment is called idle;
  `portal.activity`).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

import audit
from kiln import outbound
from kiln.cluster import DeliveryError
from kiln.cluster.backends import get_backend
from kiln.errors import InvalidInput, KilnError
from kiln.identity.models import Team
from kiln.identity.permissions import Actor, system_actor
from portal import activity, conf, selectors
from portal import compose as c
from portal.lifecycle import Status
from portal.models import Environment, Notification, TeamWebhook
from portal.services.lifecycle import audit_target, environment_update
from portal.services.queueing import enqueue_notification

REAPER = "reaper"
AWAKE_OR_ASLEEP = (Status.READY, Status.SLEEPING)
# Besides the workloads: the objects a team changes when it is using its environment.
ACTIVITY_RESOURCES = (("v1", "ConfigMap"), ("v1", "Service"))
log = logging.getLogger("kiln.portal")


class NotificationFailed(KilnError):
    """The team's webhook did not take the message (retried by the task)."""

    code = "notification_failed"
    http_status = 502


def _queue(
    *,
    team_id: int,
    environment: Environment | None,
    kind: str,
    text: str,
    about: Callable[[], dict[str, str]],
) -> Notification | None:
    """Queue `text` to the team's webhook once the caller's transaction commits (none set: None);
    the payload carries its kind and what `about()` says it is about (asked only when sent)."""
    hook = TeamWebhook.objects.filter(team_id=team_id).first()
    if hook is None:
        return None
    note = Notification.objects.create(
        team_id=team_id,
        environment=environment,
        kind=kind,
        url=hook.url,
        payload={"text": text, "kind": kind, **about()},
    )
    enqueue_notification(notification_id=note.pk)
    return note


def notification_queue(*, environment: Environment, kind: str, text: str) -> Notification | None:
    """Queue a message to the team's webhook once the caller's transaction commits (none set: None)."""

    def about() -> dict[str, str]:
        return {
            "environment": environment.public_id,
            "namespace": environment.namespace,
            "team": environment.team.slug,
        }

    return _queue(
        team_id=environment.team_id, environment=environment, kind=kind, text=text, about=about
    )


def team_notification_queue(*, team: Team, kind: str, text: str) -> Notification | None:
    """Queue a message about the team as a whole (a budget threshold) to its webhook once the
    caller's transaction commits (none set: None)."""
    return _queue(
        team_id=team.pk, environment=None, kind=kind, text=text, about=lambda: {"team": team.slug}
    )


def notification_send(*, notification_id: int, final_attempt: bool = False) -> str:
    """POST one notification as JSON; raises NotificationFailed to be retried; sent once only."""
    note = Notification.objects.filter(pk=notification_id).select_related("team").first()
    if note is None or note.status != Notification.PENDING:
        return "noop"
    body = json.dumps(note.payload).encode()
    request = urllib.request.Request(  # noqa: S310 - http(s) only, checked by team_webhook_set
        note.url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    error = ""
    opener = outbound.opener(allow_private=conf.webhook_allow_private())
    try:
        with opener.open(request, timeout=conf.http_timeout()) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        error = f"HTTP {exc.code}"  # a redirect too: it is not followed
    except urllib.error.URLError as exc:
        refused = isinstance(exc.reason, outbound.DestinationRefused)
        error = f"refused: {exc.reason}" if refused else f"no answer: {exc}"
        final_attempt = final_attempt or refused  # asking again would be refused again
    except (OSError, ValueError) as exc:
        error = f"no answer: {exc}"
    else:
        if not 200 <= status < 300:
            error = f"HTTP {status}"
    with transaction.atomic():
        note = Notification.objects.select_for_update().get(pk=notification_id)
        note.attempts += 1
        if not error:
            note.status, note.sent_at, note.last_error = Notification.SENT, timezone.now(), ""
        elif final_attempt:
            note.status, note.last_error = Notification.FAILED, error
        else:
            note.last_error = error
        note.save()
        if note.status != Notification.PENDING:
            audit.record(
                system_actor(REAPER),
                f"portal.notification.{note.status}",
                audit_target(note.environment)
                if note.environment_id
                else f"kiln.team:{note.team.slug}",
                {
                    "kind": note.kind,
                    "team": note.team.slug,
                    "attempts": note.attempts,
                    "error": error,
                },
            )
    if error and not final_attempt:
        raise NotificationFailed(f"webhook of {note.team.slug}: {error}")
    return note.status


def _idle_since(env: Environment) -> datetime:
    return env.last_activity_at or env.ready_at or env.created_at


def environments_warn_and_propose(*, now: datetime, dry_run: bool) -> dict[str, list[str]]:
    """Warn READY environments nearing expiry; propose idle ones for early teardown; expire
    idle ones whose owners did not keep them within the grace."""
    out: dict[str, list[str]] = {"warned": [], "idle_proposed": [], "idle_expired": []}
    reaper = system_actor(REAPER)
    # A sleeping environment's TTL runs on, and one asleep longer than its class allows is
    # proposed as idle as an awake one would be.
    for env in Environment.objects.filter(status__in=AWAKE_OR_ASLEEP).select_related("team"):
        lifecycle = conf.class_lifecycle(env.env_class)
        warn = (
            env.expiry_warned_at is None
            and env.expires_at is not None
            and selectors.expiry_warns_at(env) <= now
        )
        idle_from = _idle_since(env)
        propose = (
            lifecycle.idle_after is not None
            and env.idle_proposed_at is None
            and idle_from + timedelta(seconds=lifecycle.idle_after) <= now
        )
        lapse = (
            env.idle_proposed_at is not None
            and env.idle_proposed_at + timedelta(seconds=lifecycle.idle_grace) <= now
            and (env.expires_at is None or env.expires_at > now)
        )
        if propose or env.idle_proposed_at is not None:
            # Before calling it idle, and while it is proposed, look for the team's own changes
            # in its namespace (a few lists, for the environments at that point only).
            seen = _namespace_activity(env)
            if seen is _UNREADABLE:
                propose = lapse = False  # no evidence either way: decide on a later pass
            elif seen is not None and seen > max(idle_from, env.idle_proposed_at or idle_from):
                propose = lapse = False
                if not dry_run:
                    _activity_seen(env=env, actor=reaper, at=seen)
        for flag, key in ((warn, "warned"), (propose, "idle_proposed"), (lapse, "idle_expired")):
            if flag:
                out[key].append(env.public_id)
        if dry_run or not (warn or propose or lapse):
            continue
        with transaction.atomic():
            locked = Environment.objects.select_for_update().select_related("team").get(pk=env.pk)
            if locked.status not in AWAKE_OR_ASLEEP:
                continue
            if warn and locked.expiry_warned_at is None:
                _warn(env=locked, actor=reaper, now=now)
            if propose and locked.idle_proposed_at is None:
                _propose_idle(env=locked, actor=reaper, now=now, idle_from=idle_from)
            if lapse and locked.idle_proposed_at is not None:
                data = {
                    "from": locked.expires_at,
                    "to": now,
                    "proposed_at": locked.idle_proposed_at,
                }
                environment_update(
                    actor=reaper,
                    environment=locked,
                    action="idle_expired",
                    updates={"expires_at": now},
                    data=data,
                )
    return out


_UNREADABLE = object()


def _namespace_activity(env: Environment) -> datetime | None | object:
    """The latest change by the team's own field managers to the objects in its namespace (the
    workloads, their ConfigMaps and Services); _UNREADABLE if the cluster could not be read."""
    try:
        kinds = (*c.WORKLOAD_RESOURCES, *ACTIVITY_RESOURCES)
        objects = get_backend().list_kinds(kinds, env.namespace)
    except DeliveryError as exc:
        log.warning("idle check of %s: cannot read its namespace: %s", env.namespace, exc)
        return _UNREADABLE
    return activity.latest_team_change(objects)


def _activity_seen(*, env: Environment, actor: Any, at: datetime) -> None:
    """The team changed something in its namespace at `at`: that is its latest activity, and an
    idle proposal made before it is withdrawn."""
    with transaction.atomic():
        locked = Environment.objects.select_for_update().get(pk=env.pk)
        if locked.status not in AWAKE_OR_ASLEEP or (
            locked.last_activity_at is not None and locked.last_activity_at >= at
        ):
            return
        withdrawn = locked.idle_proposed_at is not None
        environment_update(
            actor=actor,
            environment=locked,
            action="activity_seen",
            updates={"last_activity_at": at, "idle_proposed_at": None},
            data={"at": at, "source": "namespace", "idle_proposal_withdrawn": withdrawn},
        )


def _warn(*, env: Environment, actor: Any, now: datetime) -> None:
    environment_update(
        actor=actor,
        environment=env,
        action="expiry_warned",
        updates={"expiry_warned_at": now},
        data={"expires_at": env.expires_at},
    )
    notification_queue(
        environment=env,
        kind="expiry_warning",
        text=f"{env.namespace} ({env.env_class}) expires at {env.expires_at.isoformat()}; "
        "extend it or defer its teardown in Kiln if you still need it.",
    )


def _propose_idle(*, env: Environment, actor: Any, now: datetime, idle_from: datetime) -> None:
    grace = conf.class_lifecycle(env.env_class).idle_grace
    environment_update(
        actor=actor,
        environment=env,
        action="idle_proposed",
        updates={"idle_proposed_at": now},
        data={"idle_since": idle_from, "teardown_after": now + timedelta(seconds=grace)},
    )
    notification_queue(
        environment=env,
        kind="idle_proposed",
        text=f"{env.namespace} has had no activity since {idle_from.isoformat()}; it will be torn "
        f"down early after {(now + timedelta(seconds=grace)).isoformat()} unless you keep it.",
    )


def webhook_url_refusal(url: str) -> str:
    """Why a team webhook cannot be at `url`, as far as the URL itself tells, or ""."""
    return outbound.url_refusal(url, allow_private=conf.webhook_allow_private())


def team_webhook_set(*, actor: Actor, team_id: int, url: str) -> TeamWebhook:
    """Set (or replace) a team's chat webhook; audited. The URL is http(s) and not at an address
    Kiln does not call (`kiln.outbound.url_refusal`)."""
    hook = TeamWebhook.objects.filter(team_id=team_id).first() or TeamWebhook(team_id=team_id)
    previous = hook.url if hook.pk else ""
    hook.url = url
    refusal = webhook_url_refusal(url)
    if refusal:
        raise InvalidInput("The request is invalid.", extra={"fields": {"url": [refusal]}})
    try:
        hook.full_clean(exclude=["team"])
    except ValidationError as exc:
        raise InvalidInput("The request is invalid.", extra={"fields": exc.message_dict}) from exc
    with transaction.atomic():
        hook.save()
        audit.record(
            actor,
            "portal.team_webhook.set",
            f"kiln.team:{hook.team.slug}",
            {"url": url, "previous": previous},
        )
    return hook


def team_webhook_delete(*, actor: Actor, hook: TeamWebhook) -> None:
    """Remove a team's chat webhook; audited."""
    with transaction.atomic():
        audit.record(
            actor, "portal.team_webhook.deleted", f"kiln.team:{hook.team.slug}", {"url": hook.url}
        )
        hook.delete()
