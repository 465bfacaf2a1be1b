"""Audit writes. `record` is the one entry point every subsystem uses."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from audit.models import OutboxEvent
from kiln.errors import InvalidInput
from kiln.observability import current_trace_id

ACTION_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_-]*){2,}$")


def actor_name(actor: Any) -> str:
    """A stable string for the actor: an Actor, a Django user or a string."""
    if actor is None:
        raise InvalidInput("an audit event needs an actor; background work uses system_actor()")
    if isinstance(actor, str):
        return actor
    username = getattr(actor, "username", None)
    if isinstance(username, str):
        return username
    return str(actor)


def target_name(target: Any) -> str:
    """A stable string for the target: `<app>.<model>:<pk>` for a model instance, else str()."""
    if isinstance(target, models.Model):
        return f"{target._meta.app_label}.{target._meta.model_name}:{target.pk}"
    return str(target)


def record(actor: Any, action: str, target: Any, data: dict[str, Any] | None = None) -> uuid.UUID:
    """Write one audit event to the outbox inside the caller's transaction and return its id.

    If the surrounding transaction rolls back, the event goes with it; once it
    commits, the relay publishes it to the audit topic and the writer chains it.
    `action` is `<app>.<entity>.<past verb>`; `data` must be JSON-serialisable.
    """
    if not isinstance(action, str) or not ACTION_RE.match(action):
        raise InvalidInput(f"audit action {action!r} is not <app>.<entity>.<past verb>")
    payload = data or {}
    try:
        payload = json.loads(json.dumps(payload, allow_nan=False, default=_json_default))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"audit data is not JSON-serialisable: {exc}") from exc
    with transaction.atomic():
        event = OutboxEvent.objects.create(
            recorded_at=timezone.now(),
            actor=actor_name(actor)[:200],
            action=action,
            target=target_name(target)[:300],
            data=payload,
            trace_id=current_trace_id(),
        )
        transaction.on_commit(_notify_relay)
    return event.event_id


def _json_default(value: Any) -> Any:
    from datetime import date, datetime
    from decimal import Decimal

    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _notify_relay() -> None:
    """Wake the relay after commit (it also polls, so a missed wake-up loses nothing)."""
    try:
        from audit import relay
    except ImportError:  # relay not installed in this build
        return
    wake = getattr(relay, "wake", None)
    if wake is not None:
        wake()
