"""Verifying the stored chain: every hash, every link, every checkpoint (audit_verify)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit import chain, notes
from audit.anchors import configured_anchors
from audit.models import Checkpoint

FETCH = 20000

PG_SELECT = (
    "SELECT seq, event_id::text, "
    "to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), "
    "actor, action, target, data, trace_id, prev_hash, hash FROM audit_chainevent"
)
SQLITE_SELECT = (
    "SELECT seq, event_id, CAST(recorded_at AS TEXT), actor, action, target, data, trace_id, "
    "prev_hash, hash FROM audit_chainevent"
)


def _sqlite_row(row: tuple) -> tuple:
    seq, event_id, recorded_at, *rest = row
    text = recorded_at.replace(" ", "T")
    if "." not in text:
        text += ".000000"
    if text.endswith("+00:00"):
        text = text[:-6]
    return (seq, str(uuid.UUID(event_id)), text + "Z", *rest)


def iter_rows(first: int = 1, last: int | None = None) -> Iterator[list[tuple]]:
    """Chain rows in seq order, in chunks, as the tuples `chain.verify_rows` reads.

    PostgreSQL reads through a server-side cursor; call inside transaction.atomic().
    """
    where = " WHERE seq >= %s" + ("" if last is None else " AND seq <= %s") + " ORDER BY seq"
    params = [first] if last is None else [first, last]
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        with connection.connection.cursor(name=f"audit_rows_{uuid.uuid4().hex[:8]}") as cursor:
            cursor.itersize = FETCH
            cursor.execute(PG_SELECT + where, params)
            while True:
                chunk = cursor.fetchmany(FETCH)
                if not chunk:
                    return
                yield chunk
    else:
        with connection.cursor() as cursor:
            cursor.execute(SQLITE_SELECT + where, params)
            while True:
                chunk = cursor.fetchmany(FETCH)
                if not chunk:
                    return
                yield [_sqlite_row(r) for r in chunk]


def load_public_key(path: str | Path | None = None) -> tuple[str, notes.Ed25519PublicKey]:
    """The checkpoint verifier key (file with a verifier key line or an Ed25519 PEM public key)."""
    from audit.services import public_key_path, signing_key

    key_path = Path(path) if path else public_key_path()
    if path is None and not key_path.exists():
        signing_key()  # dev: create the key pair, which writes the public key file
    return notes.parse_verifier_key(key_path.read_text(encoding="utf-8"))


@dataclass
class Report:
    """The outcome of a verification."""

    ok: bool
    checked: int
    checkpoints: int
    head_seq: int
    problem: chain.Problem | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def message(self) -> str:
        return str(self.problem) if self.problem else f"intact: {self.checked} entries"


def signed_checkpoints(
    name: str, key: notes.Ed25519PublicKey, *, include_anchors: bool = True
) -> tuple[dict[int, str], chain.Problem | None, int]:
    """Checkpoint sizes -> signed head hash, from the table and the anchors; the first bad one."""
    found: dict[int, str] = {}
    problem: chain.Problem | None = None
    count = 0
    sources = [(f"checkpoint #{c.id}", c.size, c.note) for c in Checkpoint.objects.order_by("size")]
    if include_anchors:
        for anchor in configured_anchors():
            note = anchor.latest()
            if note:
                sources.append((anchor.name, -1, note))
    for label, size, note in sources:
        try:
            cp = notes.verify(note, name, key)
        except notes.NoteError as exc:
            bad = chain.Problem(max(size, 1), f"{label}: {exc}")
            problem = problem or bad
            continue
        if size >= 0 and cp.size != size:
            problem = problem or chain.Problem(
                cp.size, f"{label}: stored size {size} differs from its signed size"
            )
            continue
        if found.get(cp.size, cp.head_hash) != cp.head_hash:
            problem = problem or chain.Problem(
                cp.size, f"{label}: two signed checkpoints disagree at size {cp.size}"
            )
            continue
        found[cp.size] = cp.head_hash
        count += 1
    return found, problem, count


def verify_chain(*, public_key: str | Path | None = None, include_anchors: bool = True) -> Report:
    """Recompute the whole chain and check it against every signed checkpoint."""
    started = timezone.now()
    name, key = load_public_key(public_key)
    expected, cp_problem, cp_count = signed_checkpoints(name, key, include_anchors=include_anchors)
    state = chain.VerifyState()
    problem = None
    with transaction.atomic():
        for chunk in iter_rows():
            state, problem = chain.verify_rows(chunk, state=state, expect_hash_at=expected)
            if problem:
                break
    if problem is None:
        problem = chain.check_checkpoint_sizes(state.last_seq, expected)
    if cp_problem and (problem is None or cp_problem.seq < problem.seq):
        problem = cp_problem
    seconds = (timezone.now() - started).total_seconds()
    return Report(
        ok=problem is None,
        checked=state.checked,
        checkpoints=cp_count,
        head_seq=state.last_seq,
        problem=problem,
        seconds=seconds,
    )


def signing_origin() -> str:
    """The checkpoint origin line (and key name)."""
    return settings.KILN_AUDIT_ORIGIN
