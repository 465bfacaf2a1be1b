"""Recording audit events (the outbox) and relaying them to the audit topic."""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.models import Q
from django.utils import timezone

from audit import chain
from audit.models import OutboxEvent
from audit.topic import get_topic
from kiln.errors import InvalidInput
from kiln.observability import current_trace_id

log = logging.getLogger("kiln.audit")

ACTION_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_-]*){2,}$")
RELAY_BATCH = 1000


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


_INSERT_OUTBOX = (
    "INSERT INTO audit_outboxevent "
    "(event_id, recorded_at, actor, action, target, data, data_jcs, trace_id) "
    "VALUES (%s::uuid, %s::timestamptz, %s, %s, %s, %s::jsonb, %s, %s)"
)
_valid_actions: set[str] = set()  # actions already matched against ACTION_RE (a few hundred)


def record(actor: Any, action: str, target: Any, data: dict[str, Any] | None = None) -> uuid.UUID:
    """Write one audit event to the outbox inside the caller's transaction and return its id.

    If the surrounding transaction rolls back, the event goes with it; once it
    commits, the relay publishes it to the audit topic and the writer chains it.
    `action` is `<app>.<entity>.<past verb>`; `data` must be JSON with an RFC 8785
    canonical form (no NaN, integers within ±2^53).
    """
    if action.__class__ is not str or action not in _valid_actions:
        if not isinstance(action, str) or not ACTION_RE.match(action):
            raise InvalidInput(f"audit action {action!r} is not <app>.<entity>.<past verb>")
        if len(_valid_actions) < 10_000:
            _valid_actions.add(action)
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
    recorded_at, trace_id = datetime.now(UTC), current_trace_id()
    conn = connections[DEFAULT_DB_ALIAS]  # `connection` itself, looked up once instead of per use
    # No savepoint: inside the caller's transaction the row simply belongs to it.
    with transaction.atomic(savepoint=False):
        event_id = uuid.uuid4()
        if conn.vendor == "postgresql":
            # Text parameters cast in SQL: adapting UUID and datetime objects costs more.
            params = (
                str(event_id),
                recorded_at.isoformat(),
                actor_text,
                action,
                target_text,
                data_jcs,
                data_jcs,
                trace_id,
            )
            if (
                conn.execute_wrappers
                or conn.queries_logged
                or "\x00" in actor_text + target_text
                or not _in_open_transaction(conn)
            ):
                # Query logging and wrappers see the INSERT; psycopg refuses NUL characters;
                # psycopg sends the BEGIN of a transaction that has not started yet.
                with conn.cursor() as cursor:
                    cursor.execute(_INSERT_OUTBOX, params)
            else:
                # The same connection and transaction, without the ORM cursor's per-call cost,
                # as a prepared statement: parsed and planned once per connection.
                with conn.wrap_database_errors:
                    _insert_outbox(conn, params)
        else:
            OutboxEvent.objects.create(
                event_id=event_id,
                recorded_at=recorded_at,
                actor=actor_text,
                action=action,
                target=target_text,
                data=json.loads(data_jcs),
                data_jcs=data_jcs,
                trace_id=trace_id,
            )
        _notify_relay_on_commit(conn)
    return event_id


_OUTBOX_STATEMENT = b"kiln_audit_outbox_insert"
_OUTBOX_STATEMENT_SQL = (
    b"INSERT INTO audit_outboxevent "
    b"(event_id, recorded_at, actor, action, target, data, data_jcs, trace_id) "
    b"VALUES ($1::uuid, $2::timestamptz, $3, $4, $5, $6::jsonb, $7, $8)"
)


def _in_open_transaction(conn: Any) -> bool:
    """True when the connection's session is inside a healthy transaction block right now."""
    from psycopg import pq

    return conn.connection.pgconn.transaction_status == pq.TransactionStatus.INTRANS


def _insert_outbox(conn: Any, params: tuple[str, ...]) -> None:
    """The outbox INSERT as a prepared statement on the connection's libpq handle.

    Same connection, same transaction as the ORM (only used once the transaction
    block is open: psycopg begins it lazily, on its first statement); only psycopg's
    per-call Python work is skipped (most of the INSERT's client cost). The statement
    is prepared once per connection (prepared statements outlive transactions).
    """
    raw = conn.connection
    with raw.lock:
        pgconn = raw.pgconn
        if getattr(conn, "_audit_outbox_prepared", None) is not raw:
            _check(raw, pgconn.prepare(_OUTBOX_STATEMENT, _OUTBOX_STATEMENT_SQL))
            conn._audit_outbox_prepared = raw
        result = pgconn.exec_prepared(_OUTBOX_STATEMENT, [p.encode("utf-8") for p in params])
    _check(raw, result)


def _check(raw: Any, result: Any) -> None:
    """Raise the psycopg error of a failed libpq result (Django maps it to its own)."""
    from psycopg import errors, pq

    if result.status != pq.ExecStatus.COMMAND_OK:
        raise errors.error_from_result(result, encoding=raw.info.encoding)


def _notify_relay_on_commit(conn: Any) -> None:
    """Wake the relay once per transaction: remember the commit-hook list the wake-up is in.

    Django replaces `run_on_commit` with a new list after commit, rollback and a
    savepoint rollback, so an unchanged list still holds the wake-up; only a
    replaced list is searched (once) instead of searching on every call.
    """
    hooks = conn.run_on_commit
    if getattr(conn, "_audit_relay_hooks", None) is hooks:
        return
    if not any(item[1] is _notify_relay for item in hooks):
        conn.on_commit(_notify_relay)
    conn._audit_relay_hooks = conn.run_on_commit


def _json_default(value: Any) -> Any:
    from datetime import date
    from decimal import Decimal

    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _notify_relay() -> None:
    """Wake the relay after commit; the periodic sweep covers a wake-up that fails."""
    from audit import relay

    relay.wake()


# --- relay: outbox -> topic ----------------------------------------------------------------


def relay_publish(*, max_events: int | None = None, republish_all: bool = False) -> int:
    """Publish pending outbox rows to the audit topic; returns how many were published.

    A row is pending until published, and published rows are published again
    after KILN_AUDIT_REPUBLISH_SECONDS if still not chained (the writer deletes
    rows it chained), so a stream lost with Redis loses nothing. Raises
    TopicUnavailable when Redis is down; the rows then stay pending. `republish_all`
    publishes every unchained row now (an in-process topic that started empty).
    """
    topic = get_topic()
    total = 0
    # Fixed for the whole call, so rows published by this call are never picked up again by it.
    cutoff = timezone.now() - timedelta(
        seconds=0 if republish_all else settings.KILN_AUDIT_REPUBLISH_SECONDS
    )
    while max_events is None or total < max_events:
        limit = RELAY_BATCH if max_events is None else min(RELAY_BATCH, max_events - total)
        now = timezone.now()
        with transaction.atomic():
            rows = _pending_outbox(cutoff, limit)
            if not rows:
                break
            payloads = [
                json.dumps(
                    {
                        "event_id": event_id,
                        "recorded_at": recorded_at,
                        "actor": actor,
                        "action": action,
                        "target": target,
                        "data": data_jcs or _canonical_stored(data),
                        "trace_id": trace_id,
                    },
                    ensure_ascii=False,
                ).encode("utf-8")
                for _id, event_id, recorded_at, actor, action, target, data_jcs, data, trace_id in rows
            ]
            topic.publish(payloads)
            OutboxEvent.objects.filter(id__in=[r[0] for r in rows]).update(published_at=now)
        total += len(rows)
        if len(rows) < limit:
            break
    return total


def _canonical_stored(data: Any) -> str:
    """Canonical text of outbox data stored without `data_jcs` (raw jsonb text or a dict)."""
    return chain.canonical_data(json.loads(data) if isinstance(data, str) else data)


def _pending_outbox(cutoff: datetime, limit: int) -> list[tuple]:
    """Rows to publish, locked (PostgreSQL: SKIP LOCKED, so concurrent relays split the work).

    Each row: (id, event_id str, recorded_at as hashed, actor, action, target, data_jcs, data, trace_id).
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, event_id::text, "
                "to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), "
                "actor, action, target, data_jcs, CASE WHEN data_jcs = '' THEN data END, trace_id "
                "FROM audit_outboxevent WHERE published_at IS NULL OR published_at < %s "
                "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                [cutoff, limit],
            )
            return cursor.fetchall()
    qs = (
        OutboxEvent.objects.filter(Q(published_at__isnull=True) | Q(published_at__lt=cutoff))
        .order_by("id")
        .values_list(
            "id",
            "event_id",
            "recorded_at",
            "actor",
            "action",
            "target",
            "data_jcs",
            "data",
            "trace_id",
        )
    )
    return [
        (i, str(e), chain.format_time(r), a, ac, t, dj, d, tr)
        for i, e, r, a, ac, t, dj, d, tr in qs[:limit]
    ]
