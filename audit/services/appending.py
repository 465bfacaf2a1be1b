"""The single writer's writes: appending stream entries to the chain, signing checkpoints."""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from prometheus_client import Counter

from audit import chain
from audit.chain import notes
from audit.chain.anchors import configured_anchors
from audit.chain.topic import Message
from audit.models import ChainEvent, Checkpoint, OutboxEvent
from audit.selectors import tree_root
from audit.services.tree import tree_check_consistent, tree_extend
from kiln.errors import Forbidden
from kiln.identity.permissions import Actor, can_append_chain, system_actor

log = logging.getLogger("kiln.audit")

CHAIN_APPENDED = Counter("kiln_audit_chain_appended_total", "Entries appended to the audit chain")
CHAIN_DUPLICATES = Counter(
    "kiln_audit_redeliveries_total",
    "Stream entries skipped because their event was already chained",
)
CHECKPOINTS_SIGNED = Counter("kiln_audit_checkpoints_total", "Signed audit checkpoints")

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
        event = (
            doc["event_id"],
            doc["recorded_at"],
            doc["actor"],
            doc["action"],
            doc["target"],
            doc["data"],
            doc["trace_id"],
        )
    except (ValueError, KeyError, TypeError):
        return None
    for value in event:
        if not isinstance(value, str):
            return None
    if not (
        UUID_TEXT.match(event[0]) and TIME_TEXT.match(event[1]) and chain.TRACE_ID.match(event[6])
    ):
        return None
    return event  # type: ignore[return-value]


def _need_chain(actor: Actor | None) -> None:
    """Appending and signing are the audit writer's job alone (`audit.chain`)."""
    actor = actor or system_actor("audit-writer")
    if not can_append_chain(actor):
        raise Forbidden(f"{actor} may not append to the audit chain or sign checkpoints")


def chain_head() -> tuple[int, str]:
    """(seq, hash) of the newest chain entry; (0, genesis hash) for an empty chain."""
    head = ChainEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    return head if head else (0, chain.GENESIS_HASH)


def chain_append(
    *, messages: list[Message], role: str | None = None, actor: Actor | None = None
) -> AppendResult:
    """Append a batch of stream entries to the chain in one transaction (the writer's only write).

    Redelivered event ids (already chained, or twice in the batch) are skipped;
    the entries' Merkle leaves are added to the tree's tiles and the chained events'
    outbox rows are deleted in the same transaction. With
    `role` (PostgreSQL) the insert runs as that role, the only one allowed to.
    Only the audit writer (`audit.chain`, the default actor) appends.
    """
    _need_chain(actor)
    parsed: list[tuple[str, str, str, str, str, str, str]] = []
    malformed = 0
    for entry_id, payload in messages:
        event = _parse(payload)
        if event is None:
            malformed += 1
            log.error("audit stream entry %s cannot be chained; left out", entry_id)
            continue
        parsed.append(event)
    as_role = bool(role) and connection.vendor == "postgresql"
    with transaction.atomic():
        if as_role:
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
            insert_entries(entries=entries)
            tree_extend(size=head_seq, entries=entries)
            head_seq, head_hash = entries[-1].seq, entries[-1].hash
        _outbox_delete(ids)
        if as_role:
            # SET LOCAL lasts until the outermost transaction ends: inside a longer one (the
            # fault drills' pause, a caller's own atomic) the rest must not run as the writer.
            # A rollback of this block's savepoint restores the role by itself.
            with connection.cursor() as cursor:
                cursor.execute("RESET ROLE")
    CHAIN_APPENDED.inc(len(entries))
    CHAIN_DUPLICATES.inc(len(parsed) - len(entries))
    return AppendResult(len(entries), len(parsed) - len(entries), malformed, head_seq, head_hash)


# The batch's event ids travel as one uuid[] parameter on PostgreSQL. Kept for the end-to-end
# target (>= 5,000 events/s, one writer): `event_id__in` writes a placeholder per id, and the
# client-side binding then splits and quotes a thousand of them in Python for the lookup and
# again for the delete (docs/audit.md, "Measured choices").
_CHAINED_IDS = "SELECT event_id::text FROM audit_chainevent WHERE event_id = ANY(%s::uuid[])"
_OUTBOX_DELETE = "DELETE FROM audit_outboxevent WHERE event_id = ANY(%s::uuid[])"


def _chained_ids(ids: list[str]) -> set[str]:
    """Which of these event ids (lowercase hyphenated text) are already in the chain."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_CHAINED_IDS, [ids])
            return {row[0] for row in cursor.fetchall()}
    chained = ChainEvent.objects.filter(event_id__in=ids).values_list("event_id", flat=True)
    return {str(event_id) for event_id in chained}


def _outbox_delete(ids: list[str]) -> None:
    """Delete the outbox rows of these events (chained now, or before: redeliveries)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_OUTBOX_DELETE, [ids])
        return
    OutboxEvent.objects.filter(event_id__in=ids).delete()


def insert_entries(*, entries: list[chain.Entry]) -> None:
    """Append the entries: COPY on PostgreSQL, a bulk INSERT elsewhere.

    COPY is kept for the end-to-end target (>= 5,000 events/s): the single writer's time
    per entry caps the whole pipeline, and every process shares two cores (400 us of CPU per
    event). Building and inserting a batch cost 92 us of wall time an entry with COPY (12.5 us
    client CPU), against 143 us with `executemany` (31 us) and 326 us with `bulk_create`
    (126 us) (`audit_choices_bench`, docs/audit.md).
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor, cursor.cursor.copy(_COPY_CHAIN) as copy:
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


_COPY_CHAIN = f"COPY audit_chainevent ({', '.join(chain.ROW_COLUMNS)}) FROM STDIN"


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


def checkpoint_create(*, force: bool = False, actor: Actor | None = None) -> Checkpoint | None:
    """Sign the current tree head and store it (and push it to the anchors), unless already covered.

    Never two inconsistent checkpoints: before signing, the new tree is proved (RFC 9162
    consistency proof from the stored tiles) to extend the one of the last checkpoint that
    carries a root; if it does not, nothing is signed and CheckpointRefused names both sizes.
    """
    _need_chain(actor)
    head_seq, head_hash = chain_head()
    if head_seq == 0:
        return None
    last = Checkpoint.objects.order_by("-size", "-id").values_list("size", flat=True).first()
    if last == head_seq and not force:
        return None
    root = tree_root(size=head_seq)
    tree_check_consistent(size=head_seq, root=root)
    now = timezone.now()
    statement = notes.Checkpoint(
        settings.KILN_AUDIT_ORIGIN,
        head_seq,
        head_hash,
        notes.time_text(now.astimezone(UTC)),
        root.hex(),
    )
    note = notes.sign(statement, settings.KILN_AUDIT_ORIGIN, signing_key())
    results = []
    for anchor in configured_anchors():
        try:
            results.append(f"{anchor.name}: {anchor.push(head_seq, note)}")
        except Exception as exc:  # noqa: BLE001 - an anchor outage must not stop chaining; it is reported
            log.error("checkpoint %s not anchored at %s: %s", head_seq, anchor.name, exc)
            results.append(f"{anchor.name}: FAILED {exc.__class__.__name__}")
    CHECKPOINTS_SIGNED.inc()
    return Checkpoint.objects.create(
        size=head_seq,
        head_hash=head_hash,
        root_hash=root.hex(),
        signed_at=now,
        note=note,
        anchored="\n".join(results),
    )
