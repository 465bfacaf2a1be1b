"""Recording audit events: `record()` writes one outbox row in the caller's transaction."""

from __future__ import annotations

import functools
import json
import re
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from django.db import connection, models, transaction
from opentelemetry.instrumentation.utils import suppress_instrumentation

from audit import chain
from audit.chain import relay
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
    `action` is `<app>.<entity>.<past verb>`; `data` must be JSON with an RFC 8785
    canonical form (no NaN, integers within ±2^53); dates, decimals and UUIDs are
    written as text.
    """
    if not isinstance(action, str) or not ACTION_RE.match(action):
        raise InvalidInput(f"audit action {action!r} is not <app>.<entity>.<past verb>")
    try:
        payload = json.loads(json.dumps(data or {}, allow_nan=False, default=_json_default))
        data_jcs = chain.canonical_data(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"audit data is not canonical JSON: {exc}") from exc
    actor_text, target_text = actor_name(actor)[:200], target_name(target)[:300]
    try:
        actor_text.encode("utf-8")
        target_text.encode("utf-8")
    except UnicodeError as exc:
        raise InvalidInput("audit actor and target must be valid Unicode text") from exc
    event_id = uuid.uuid4()
    values = (event_id, datetime.now(UTC), actor_text, action, target_text, data_jcs, data_jcs,
              current_trace_id())  # fmt: skip
    # No savepoint: inside the caller's transaction the row simply belongs to it.
    with transaction.atomic(savepoint=False):
        _insert_outbox(values)
        relay.wake_on_commit()
    return event_id


def _insert_outbox(values: tuple) -> None:
    """The outbox row, in the caller's transaction.

    On PostgreSQL (Kiln's backend, `kiln/postgresql/base.py`) the row is deferred: the rows
    a transaction records are written together (one INSERT; a COPY beyond ten) just before
    its next statement or its commit, so a transaction that records several events pays one
    round trip for them, and whatever it runs after recording sees them. Kept for the
    end-to-end target (>= 5,000 events/s, 400 us of CPU per event on two cores): with an
    INSERT per event `audit_bench` reached about 4,100 events/s, with the rows written
    together 7,265 to 7,653 (docs/audit.md). Elsewhere (SQLite, standalone) one
    INSERT through Django's cursor. Neither path has a tracing span of its own: the event
    already carries the trace id of the request or task that recorded it (a span per INSERT
    cost 173 us).
    """
    defer_row = getattr(connection, "defer_row", None)
    if defer_row is not None:
        defer_row(OutboxEvent._meta.db_table, _COLUMNS, values)
        return
    with suppress_instrumentation(), connection.cursor() as cursor:
        cursor.execute(INSERT_OUTBOX, outbox_values(values))


_COLUMNS = ("event_id", "recorded_at", "actor", "action", "target", "data", "data_jcs", "trace_id")
INSERT_OUTBOX = (
    f"INSERT INTO audit_outboxevent ({', '.join(_COLUMNS)}) "  # noqa: S608 - fixed column names
    f"VALUES ({', '.join(['%s'] * len(_COLUMNS))})"
)


def outbox_values(values: tuple) -> list:
    """The outbox row's values as Django's cursor takes them, adapted by the model's own fields.

    `data` is passed as its canonical JSON text, which both databases take for a JSON column.
    Used where the INSERT goes through Django's cursor (databases other than PostgreSQL).
    """
    fields = _outbox_fields()
    return [
        value if name in ("data", "data_jcs") else fields[name].get_db_prep_save(value, connection)
        for name, value in zip(_COLUMNS, values, strict=True)
    ]


@functools.cache
def _outbox_fields() -> dict[str, models.Field]:
    return {name: OutboxEvent._meta.get_field(name) for name in _COLUMNS}


def _json_default(value: Any) -> Any:
    """Dates and times as ISO 8601, decimals and UUIDs as their text; anything else is refused."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")
