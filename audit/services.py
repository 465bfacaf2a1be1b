"""Audit writes: `record` (every subsystem), the relay, the chain append, checkpoints, verification runs."""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, models, transaction
from django.db.models import Q
from django.utils import timezone

from audit import chain, notes
from audit.models import ChainEvent, Checkpoint, OutboxEvent, VerificationRun
from audit.topic import Message, get_topic
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


def record(actor: Any, action: str, target: Any, data: dict[str, Any] | None = None) -> uuid.UUID:
    """Write one audit event to the outbox inside the caller's transaction and return its id.

    If the surrounding transaction rolls back, the event goes with it; once it
    commits, the relay publishes it to the audit topic and the writer chains it.
    `action` is `<app>.<entity>.<past verb>`; `data` must be JSON with an RFC 8785
    canonical form (no NaN, integers within ±2^53).
    """
    if not isinstance(action, str) or not ACTION_RE.match(action):
        raise InvalidInput(f"audit action {action!r} is not <app>.<entity>.<past verb>")
    payload = data or {}
    try:
        payload = json.loads(json.dumps(payload, allow_nan=False, default=_json_default))
        data_jcs = chain.canonical_data(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"audit data is not canonical JSON: {exc}") from exc
    actor_text, target_text = actor_name(actor)[:200], target_name(target)[:300]
    try:
        actor_text.encode("utf-8")
        target_text.encode("utf-8")
    except UnicodeError as exc:
        raise InvalidInput("audit actor and target must be valid Unicode text") from exc
    recorded_at, trace_id = timezone.now(), current_trace_id()
    # No savepoint: inside the caller's transaction the row simply belongs to it.
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql":
            # One plain INSERT: the ORM's per-row overhead would be most of record()'s cost.
            event_id = uuid.uuid4()
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO audit_outboxevent "
                    "(event_id, recorded_at, actor, action, target, data, data_jcs, trace_id) "
                    "VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s)",
                    [
                        event_id,
                        recorded_at,
                        actor_text,
                        action,
                        target_text,
                        data_jcs,
                        data_jcs,
                        trace_id,
                    ],
                )
        else:
            event_id = OutboxEvent.objects.create(
                recorded_at=recorded_at,
                actor=actor_text,
                action=action,
                target=target_text,
                data=payload,
                data_jcs=data_jcs,
                trace_id=trace_id,
            ).event_id
        if not any(item[1] is _notify_relay for item in connection.run_on_commit):
            transaction.on_commit(_notify_relay)
    return event_id


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


# --- writer: topic -> chain ----------------------------------------------------------------


@dataclass(frozen=True)
class AppendResult:
    """What one batch did: entries appended, redeliveries ignored, unreadable entries, new head."""

    appended: int
    duplicates: int
    malformed: int
    head_seq: int
    head_hash: str


_FIELDS = ("event_id", "recorded_at", "actor", "action", "target", "data", "trace_id")


UUID_TEXT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TIME_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def _parse(payload: bytes) -> tuple[str, str, str, str, str, str, str] | None:
    """One stream entry as an event tuple, or None if it cannot be chained."""
    try:
        doc = json.loads(payload)
        event = tuple(doc[f] for f in _FIELDS)
    except (ValueError, KeyError, TypeError):
        return None
    if not all(isinstance(v, str) for v in event):
        return None
    if not (
        UUID_TEXT.match(event[0]) and TIME_TEXT.match(event[1]) and chain.TRACE_ID.match(event[6])
    ):
        return None
    return event  # type: ignore[return-value]


def chain_head() -> tuple[int, str]:
    """(seq, hash) of the newest chain entry; (0, genesis hash) for an empty chain."""
    head = ChainEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    return head if head else (0, chain.GENESIS_HASH)


def chain_append(messages: list[Message], *, role: str | None = None) -> AppendResult:
    """Append a batch of stream entries to the chain in one transaction (the writer's only write).

    Redelivered event ids (already chained, or twice in the batch) are skipped;
    the chained events' outbox rows are deleted in the same transaction. With
    `role` (PostgreSQL) the insert runs as that role, the only one allowed to.
    """
    parsed: list[tuple[str, str, str, str, str, str, str]] = []
    malformed = 0
    for entry_id, payload in messages:
        event = _parse(payload)
        if event is None:
            malformed += 1
            log.error("audit stream entry %s cannot be chained; left out", entry_id)
            continue
        parsed.append(event)
    with transaction.atomic():
        if role and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f'SET LOCAL ROLE "{role}"')
        ids = [e[0] for e in parsed]
        seen = _chained_ids(ids)
        fresh = []
        for event in parsed:
            if event[0] not in seen:
                seen.add(event[0])
                fresh.append(event)
        head_seq, head_hash = chain_head()
        entries = list(chain.build_entries(head_seq, head_hash, fresh))
        if entries:
            _insert(entries)
            head_seq, head_hash = entries[-1].seq, entries[-1].hash
        if ids:
            _outbox_delete(ids)
    return AppendResult(len(entries), len(parsed) - len(entries), malformed, head_seq, head_hash)


def _chained_ids(ids: list[str]) -> set[str]:
    """Which of these event ids are already in the chain."""
    if not ids:
        return set()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT event_id::text FROM audit_chainevent WHERE event_id = ANY(%s::uuid[])",
                [ids],
            )
            return {r[0] for r in cursor.fetchall()}
    return {
        str(u)
        for u in ChainEvent.objects.filter(event_id__in=ids).values_list("event_id", flat=True)
    }


def _outbox_delete(ids: list[str]) -> None:
    """Remove chained events from the outbox."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM audit_outboxevent WHERE event_id = ANY(%s::uuid[])", [ids])
        return
    OutboxEvent.objects.filter(event_id__in=ids).delete()


def _insert(entries: list[chain.Entry]) -> None:
    """Bulk insert: COPY on PostgreSQL, one executemany elsewhere."""
    if connection.vendor == "postgresql":
        columns = (
            "seq, event_id, recorded_at, actor, action, target, data, trace_id, prev_hash, hash"
        )
        with connection.cursor() as cursor:
            raw = cursor.cursor
            with raw.copy(f"COPY audit_chainevent ({columns}) FROM STDIN") as copy:
                for e in entries:
                    copy.write_row(e.as_row())
        return
    ChainEvent.objects.bulk_create(
        [
            ChainEvent(
                seq=e.seq,
                event_id=uuid.UUID(e.event_id),
                recorded_at=datetime.fromisoformat(e.recorded_at),
                actor=e.actor,
                action=e.action,
                target=e.target,
                data=e.data,
                trace_id=e.trace_id,
                prev_hash=e.prev_hash,
                hash=e.hash,
            )
            for e in entries
        ],
        batch_size=200,
    )


# --- checkpoints ---------------------------------------------------------------------------


def signing_key() -> notes.Ed25519PrivateKey:
    """The checkpoint signing key; in dev/standalone it is generated on first use."""
    path = Path(settings.KILN_AUDIT_SIGNING_KEY)
    try:
        key = notes.load_or_create_private_key(path, create=settings.KILN_AUDIT_SIGNING_KEY_IS_DEV)
    except FileExistsError:  # another process created it a moment ago
        key = notes.load_or_create_private_key(path, create=False)
    public_path = public_key_path()
    vkey = notes.verifier_key(settings.KILN_AUDIT_ORIGIN, key.public_key())
    if not public_path.exists() or public_path.read_text().strip() != vkey:
        public_path.write_text(vkey + "\n")
    return key


def public_key_path() -> Path:
    """Where the verifier key for auditors is written: beside the signing key, `.pub`."""
    return Path(settings.KILN_AUDIT_SIGNING_KEY).with_suffix(".pub")


def checkpoint_create(*, force: bool = False) -> Checkpoint | None:
    """Sign the current head and store it (and push it to the anchors), unless already covered."""
    from audit.anchors import configured_anchors

    head_seq, head_hash = chain_head()
    if head_seq == 0:
        return None
    last = Checkpoint.objects.order_by("-size", "-id").values_list("size", flat=True).first()
    if last == head_seq and not force:
        return None
    now = timezone.now()
    statement = notes.Checkpoint(
        settings.KILN_AUDIT_ORIGIN, head_seq, head_hash, notes.time_text(now.astimezone(chain.UTC))
    )
    note = notes.sign(statement, settings.KILN_AUDIT_ORIGIN, signing_key())
    results = []
    for anchor in configured_anchors():
        try:
            results.append(f"{anchor.name}: {anchor.push(head_seq, note)}")
        except Exception as exc:  # noqa: BLE001 - an anchor outage must not stop chaining; it is reported
            log.error("checkpoint %s not anchored at %s: %s", head_seq, anchor.name, exc)
            results.append(f"{anchor.name}: FAILED {exc.__class__.__name__}")
    return Checkpoint.objects.create(
        size=head_seq, head_hash=head_hash, signed_at=now, note=note, anchored="\n".join(results)
    )


# --- verification runs ---------------------------------------------------------------------


def verification_run_store(
    *,
    started_at: datetime,
    ok: bool,
    checked: int,
    checkpoints: int,
    first_bad_seq: int | None,
    message: str,
) -> VerificationRun:
    """Store the outcome of a chain verification, audited."""
    from kiln.identity.permissions import system_actor

    with transaction.atomic():
        run = VerificationRun.objects.create(
            started_at=started_at,
            finished_at=timezone.now(),
            ok=ok,
            checked=checked,
            checkpoints=checkpoints,
            first_bad_seq=first_bad_seq,
            message=message[:2000],
        )
        record(
            system_actor("audit-verifier"),
            "audit.chain.verified",
            run,
            {
                "ok": ok,
                "checked": checked,
                "first_bad_seq": first_bad_seq,
                "message": message[:500],
            },
        )
    return run


# --- database roles ------------------------------------------------------------------------

ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def roles_setup(*, writer_role: str, app_role: str) -> list[str]:
    """Create the writer and application roles and grant them (PostgreSQL; idempotent).

    The writer role alone may INSERT into the chain; the application role may only
    SELECT it (and write the outbox). The connecting user becomes a member of the
    writer role so the writer process can `SET ROLE` to it.
    """
    if connection.vendor != "postgresql":
        return ["no database roles on SQLite: the triggers keep the chain append-only"]
    for role in (writer_role, app_role):
        if not ROLE_NAME.match(role):
            raise InvalidInput(f"role name {role!r} is not a plain lowercase identifier")
    w, a = f'"{writer_role}"', f'"{app_role}"'
    done: list[str] = []
    try:
        connection.ensure_connection()
    except OperationalError:
        # The database does not exist yet (a fresh server before `migrate`, or a test run whose
        # test database pytest creates): roles are server-wide, so create them from the server's
        # maintenance database; grants follow once the tables exist.
        return _roles_create_on_server((writer_role, app_role))
    if "audit_chainevent" not in connection.introspection.table_names():
        return [
            *_roles_create_on_server((writer_role, app_role)),
            "no audit tables yet: run migrate, then again",
        ]
    with transaction.atomic(), connection.cursor() as cursor:
        for role in (writer_role, app_role):
            cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE ROLE "{role}" LOGIN')
                done.append(f"created role {role}")
        cursor.execute("SELECT current_database(), current_user")
        database, me = cursor.fetchone()
        statements = [
            f'GRANT CONNECT ON DATABASE "{database}" TO {w}, {a}',
            f"GRANT USAGE ON SCHEMA public TO {w}, {a}",
            f"REVOKE ALL ON audit_chainevent FROM PUBLIC, {w}, {a}",
            f"GRANT SELECT ON audit_chainevent TO {a}",
            f"GRANT SELECT, INSERT ON audit_chainevent TO {w}",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON audit_outboxevent TO {a}",
            f"GRANT SELECT, DELETE ON audit_outboxevent TO {w}",
            f"GRANT SELECT ON audit_checkpoint, audit_verificationrun TO {a}, {w}",
        ]
        for table in ("audit_outboxevent",):
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            sequence = cursor.fetchone()[0]
            if sequence:
                statements.append(f"GRANT USAGE, SELECT ON SEQUENCE {sequence} TO {a}")
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cursor.fetchone()[0]:
            statements.append(f'GRANT {w} TO "{me}"')
        for sql in statements:
            cursor.execute(sql)
        done.append(
            f"{writer_role}: SELECT, INSERT on the chain; {app_role}: SELECT only (database {database})"
        )
        from kiln.identity.permissions import system_actor

        record(
            system_actor("audit-setup"),
            "audit.roles.configured",
            f"database:{database}",
            {"writer_role": writer_role, "app_role": app_role},
        )
    return done


def export_create(*, actor: Any, since: datetime | None, until: datetime | None, fmt: str):
    """Choose the segment to export and record who exported what (`audit.export.created`)."""
    from audit.selectors import export_segment

    segment = export_segment(since, until)
    with transaction.atomic():
        record(
            actor,
            "audit.export.created",
            "audit.chain",
            {
                "from": since.isoformat() if since else None,
                "to": until.isoformat() if until else None,
                "format": fmt,
                "first_seq": segment.first_seq if segment else None,
                "last_seq": segment.last_seq if segment else None,
            },
        )
    return segment


def _roles_create_on_server(roles: tuple[str, ...]) -> list[str]:
    """Create missing roles through the server's `postgres` database (no grants)."""
    import psycopg

    db = connection.settings_dict
    done = []
    with psycopg.connect(
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        user=db["USER"] or None,
        password=db["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as server:
        for role in roles:
            if (
                server.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone()
                is None
            ):
                try:
                    server.execute(f'CREATE ROLE "{role}" LOGIN')
                    done.append(f"created role {role}")
                except psycopg.errors.DuplicateObject:
                    pass  # created concurrently
    return [*done, f"roles {', '.join(roles)} exist on the server"]
