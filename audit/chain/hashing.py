"""The audit hash chain, without Django: the canonical entry, its hash, and verification.

Hash input of chain entry `seq` (docs/audit.md shows the byte layout):

    hash = SHA-256( prev_hash_hex_ascii || JCS(entry) )

where `prev_hash_hex_ascii` is the 64 lowercase hex digits of the previous entry's
hash (64 ASCII zeros for seq 1) and `JCS(entry)` is the RFC 8785 canonical JSON,
UTF-8, of the object with exactly the keys action, actor, data, event_id,
recorded_at, seq, target, trace_id. `entry_bytes` is the one place that builds it;
chaining, export and both verifiers call it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import rfc8785

GENESIS_HASH = "0" * 64
KEYS = ("action", "actor", "data", "event_id", "recorded_at", "seq", "target", "trace_id")
# A stored (and exported) entry, in this order: the tuples `verify_rows` reads.
ROW_COLUMNS = (
    "seq", "event_id", "recorded_at", "actor", "action", "target", "data", "trace_id",
    "prev_hash", "hash",
)  # fmt: skip
HEX64 = re.compile(r"^[0-9a-f]{64}$")
TRACE_ID = re.compile(r"^([0-9a-f]{32})?$")

# A JSON string as RFC 8785 writes it (section 3.2.2.2): only `"`, `\\` and control characters
# are escaped, controls without a short form as lowercase `\\u00xx`, everything else as is: the
# standard library's string encoder with `ensure_ascii=False` (what `json.dumps` calls for a str).
_json_string = json.encoder.encode_basestring


class CanonicalError(ValueError):
    """A value that has no RFC 8785 canonical form (NaN, huge integers, lone surrogates...)."""


def canonical_data(data: Any) -> str:
    """RFC 8785 canonical JSON text of an event's `data` (raises CanonicalError)."""
    try:
        return rfc8785.dumps(data).decode("utf-8")
    except (
        rfc8785.CanonicalizationError,
        TypeError,
        ValueError,
        UnicodeError,
        RecursionError,
    ) as exc:
        raise CanonicalError(str(exc) or exc.__class__.__name__) from exc


def format_time(moment: datetime) -> str:
    """`recorded_at` as hashed: RFC 3339 UTC with exactly six fractional digits and `Z`."""
    if moment.tzinfo is None:
        raise ValueError("recorded_at must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def entry_bytes(
    seq: int,
    event_id: str,
    recorded_at: str,
    actor: str,
    action: str,
    target: str,
    data_jcs: str,
    trace_id: str,
) -> bytes:
    """RFC 8785 canonical JSON (UTF-8) of one entry; `data_jcs` is the canonical text of `data`.

    The keys are fixed and written in RFC 8785 order, `data` is already canonical text and
    each string is written as RFC 8785 writes it, so the result is JCS of the whole entry
    without parsing `data` again. Kept for the verification target (>= 200,000 entries/s):
    with the hash, `rfc8785.dumps` over the parsed entry cost 51 us an entry against 5.2 us
    for this (`audit_choices_bench`), which would cap verification near 20,000 entries/s a core.
    """
    s = _json_string
    return (
        f'{{"action":{s(action)},"actor":{s(actor)},"data":{data_jcs},'
        f'"event_id":{s(event_id)},"recorded_at":{s(recorded_at)},"seq":{int(seq)},'
        f'"target":{s(target)},"trace_id":{s(trace_id)}}}'
    ).encode()


def entry_hash(prev_hash: str, body: bytes) -> str:
    """SHA-256(prev_hash hex ASCII || `body`, the entry's `entry_bytes`) as 64 lowercase hex digits."""
    return hashlib.sha256(prev_hash.encode("ascii") + body).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One chain entry as stored and exported."""

    seq: int
    event_id: str
    recorded_at: str
    actor: str
    action: str
    target: str
    data: str  # RFC 8785 canonical JSON text
    trace_id: str
    prev_hash: str
    hash: str

    def body(self) -> bytes:
        """The canonical entry (`entry_bytes`): what the chain hashes and the Merkle leaf holds."""
        return entry_bytes(
            self.seq, self.event_id, self.recorded_at, self.actor, self.action, self.target,
            self.data, self.trace_id,
        )  # fmt: skip

    def as_row(self) -> tuple:
        """The entry as the row tuple `verify_rows` reads."""
        return (
            self.seq,
            self.event_id,
            self.recorded_at,
            self.actor,
            self.action,
            self.target,
            self.data,
            self.trace_id,
            self.prev_hash,
            self.hash,
        )


def build_entries(
    head_seq: int, head_hash: str, events: Iterable[tuple[str, str, str, str, str, str, str]]
) -> Iterator[Entry]:
    """Chain `events` (event_id, recorded_at, actor, action, target, data_jcs, trace_id) after the head."""
    seq, prev = head_seq, head_hash
    for event_id, recorded_at, actor, action, target, data_jcs, trace_id in events:
        seq += 1
        body = entry_bytes(seq, event_id, recorded_at, actor, action, target, data_jcs, trace_id)
        digest = entry_hash(prev, body)
        yield Entry(
            seq, event_id, recorded_at, actor, action, target, data_jcs, trace_id, prev, digest
        )
        prev = digest


@dataclass(frozen=True)
class Problem:
    """The first thing wrong with a chain: the seq it concerns and what is wrong."""

    seq: int
    reason: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.reason}"


@dataclass
class VerifyState:
    """Where a verification stands: rows checked, the last seq and hash, hashes at checkpoint sizes."""

    checked: int = 0
    last_seq: int = 0
    last_hash: str = GENESIS_HASH
    before_last_hash: str = GENESIS_HASH


def verify_rows(
    rows: Iterable[tuple],
    *,
    state: VerifyState | None = None,
    expect_hash_at: dict[int, str] | None = None,
    segment: bool = False,
) -> tuple[VerifyState, Problem | None]:
    """Recompute every row's hash and link; stop at the first problem.

    `rows` are (seq, event_id, recorded_at, actor, action, target, data, trace_id,
    prev_hash, hash) in seq order. `state` continues an earlier call. With
    `segment` (an export) the first row may start above seq 1 and its prev_hash
    is taken as given. `expect_hash_at` maps checkpoint sizes to the signed head
    hash at that size. The returned state covers the rows before the first problem.
    """
    st = state or VerifyState()
    expected = expect_hash_at or {}
    segment_start = segment and st.checked == 0 and st.last_seq == 0
    for row in rows:
        seq, event_id, recorded_at, actor, action, target, data, trace_id, prev_hash, digest = row
        if segment_start:
            # An exported segment may start after seq 1: its first prev_hash is taken as given
            # (a signed checkpoint at seq-1, when present, vouches for it).
            segment_start = False
            if seq != 1:
                st.last_seq, st.last_hash = seq - 1, prev_hash
                if seq - 1 in expected and expected[seq - 1] != prev_hash:
                    return st, Problem(
                        seq, f"prev_hash does not match the checkpoint signed at size {seq - 1}"
                    )
        # The intact row's checks; `_row_problem` says what is wrong with one that fails them.
        if (
            seq != st.last_seq + 1
            or prev_hash != st.last_hash
            or entry_hash(
                prev_hash,
                entry_bytes(seq, event_id, recorded_at, actor, action, target, data, trace_id),
            )
            != digest
            or (seq in expected and expected[seq] != digest)
        ):
            return st, _row_problem(st, expected, row)
        st.before_last_hash, st.last_hash, st.last_seq = st.last_hash, digest, seq
        st.checked += 1
    return st, None


def _row_problem(st: VerifyState, expected: dict[int, str], row: tuple) -> Problem | None:
    """What is wrong with `row` as the entry after `st`, or None."""
    seq, event_id, recorded_at, actor, action, target, data, trace_id, prev_hash, digest = row
    last = st.last_seq
    if seq != last + 1:
        if seq > last + 1:
            return Problem(last + 1, f"missing: the chain jumps from seq {last} to {seq}")
        return Problem(seq, f"out of order: seq {seq} follows seq {last}")
    if prev_hash != st.last_hash:
        if seq > 1 and prev_hash == st.before_last_hash:
            return Problem(
                seq - 1,
                f"inserted: seq {seq} links to seq {seq - 2}, so seq {seq - 1} is not the original entry",
            )
        return Problem(seq, f"prev_hash does not link to the hash of seq {seq - 1}")
    body = entry_bytes(seq, event_id, recorded_at, actor, action, target, data, trace_id)
    if entry_hash(prev_hash, body) != digest:
        return Problem(seq, "contents do not match the stored hash (edited or swapped)")
    if seq in expected and expected[seq] != digest:
        return Problem(seq, f"hash differs from the checkpoint signed at size {seq}")
    return None


def check_checkpoint_sizes(head_seq: int, sizes: Iterable[int]) -> Problem | None:
    """A checkpoint larger than the chain proves the tail was truncated."""
    largest = max(sizes, default=0)
    if largest > head_seq:
        return Problem(
            head_seq + 1,
            f"truncated: a signed checkpoint covers {largest} entries but the chain ends at seq {head_seq}",
        )
    return None


def now_utc() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)
