"""The audit hash chain, without Django: canonical bytes, entry hashes and verification.

Hash input of chain entry `seq` (README "Audit chain" shows the byte layout):

    hash = SHA-256( prev_hash_hex_ascii || JCS(entry) )

where `prev_hash_hex_ascii` is the 64 lowercase hex digits of the previous entry's
hash (64 ASCII zeros for seq 1) and `JCS(entry)` is the RFC 8785 canonical JSON,
UTF-8, of the object with exactly the keys action, actor, data, event_id,
recorded_at, seq, target, trace_id. `data` is stored as its own JCS text, so the
canonical object is assembled here with the standard library's C encoder: for
strings it writes exactly what RFC 8785 writes (section 3.2.2.2: only `"`, `\\`
and control characters are escaped, control characters without a short form as
lowercase `\\u00xx`), and the fixed keys are already in RFC 8785 sort order.
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
HEX64 = re.compile(r"^[0-9a-f]{64}$")
TRACE_ID = re.compile(r"^([0-9a-f]{32})?$")
MAX_SAFE_INTEGER = 2**53 - 1  # RFC 8785 numbers are IEEE 754 doubles

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# Characters RFC 8785 escapes inside strings (and lone surrogates, which have no UTF-8 form).
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\ud800-\udfff]').search
_sha256 = hashlib.sha256


class CanonicalError(ValueError):
    """A value that has no RFC 8785 canonical form (NaN, huge integers, lone surrogates...)."""


def _plain(value: Any) -> bool:
    """True when the standard library's sorted, compact JSON of `value` is already RFC 8785:
    no floats (their formatting differs), integers within ±2^53, ASCII keys (so code-point
    order is UTF-16 order)."""
    if isinstance(value, str) or value is None or value is True or value is False:
        return True
    if isinstance(value, int):
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if isinstance(value, dict):
        return all(isinstance(k, str) and k.isascii() and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return False


_plain_dumps = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
).encode


def _plain_flat(value: dict) -> bool:
    """`_plain` for the usual event data, a dict of exact str/int/bool/None values (no recursion)."""
    for k, v in value.items():
        if k.__class__ is not str or not k.isascii():
            return False
        cls = v.__class__
        if cls is int:
            if not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                return False
        elif cls is not str and cls is not bool and v is not None and not _plain(v):
            return False
    return True


def canonical_plain(data: Any) -> str | None:
    """RFC 8785 text of JSON-native `data` without floats or huge integers, or None when `data`
    needs the general path (any other type, floats, non-ASCII keys); raises CanonicalError."""
    try:
        if not (_plain_flat(data) if data.__class__ is dict else _plain(data)):
            return None
        text = _plain_dumps(data)
        text.encode("utf-8")  # lone surrogates have no canonical form
    except (TypeError, ValueError, UnicodeError, RecursionError) as exc:
        raise CanonicalError(str(exc) or exc.__class__.__name__) from exc
    return text


def canonical_data(data: Any) -> str:
    """RFC 8785 canonical JSON text of an event's `data` (raises CanonicalError)."""
    try:
        if _plain(data):
            text = _plain_dumps(data)
            text.encode("utf-8")  # lone surrogates have no canonical form
            return text
        return rfc8785.dumps(data).decode("utf-8")
    except (rfc8785.CanonicalizationError, TypeError, ValueError, UnicodeError) as exc:
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
    """RFC 8785 canonical JSON (UTF-8) of one entry; `data_jcs` is the canonical text of `data`."""
    return (
        '{"action":%s,"actor":%s,"data":%s,"event_id":%s,"recorded_at":%s,'  # noqa: UP031 - fastest
        '"seq":%d,"target":%s,"trace_id":%s}'
        % (
            _encode(action),
            _encode(actor),
            data_jcs,
            _encode(event_id),
            _encode(recorded_at),
            seq,
            _encode(target),
            _encode(trace_id),
        )
    ).encode("utf-8")


def entry_hash(
    prev_hash: str,
    seq: int,
    event_id: str,
    recorded_at: str,
    actor: str,
    action: str,
    target: str,
    data_jcs: str,
    trace_id: str,
) -> str:
    """SHA-256(prev_hash hex ASCII || JCS(entry)) as 64 lowercase hex digits."""
    body = entry_bytes(seq, event_id, recorded_at, actor, action, target, data_jcs, trace_id)
    return _sha256(prev_hash.encode("ascii") + body).hexdigest()


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
    sha, needs_escape = _sha256, _NEEDS_ESCAPE
    for event_id, recorded_at, actor, action, target, data_jcs, trace_id in events:
        seq += 1
        if needs_escape(action + actor + event_id + recorded_at + target + trace_id) is None:
            # Nothing to escape: each string's JSON form is the string in quotes (as in verify_rows).
            body = (
                '{"action":"%s","actor":"%s","data":%s,"event_id":"%s","recorded_at":"%s",'  # noqa: UP031 - fastest
                '"seq":%d,"target":"%s","trace_id":"%s"}'
                % (action, actor, data_jcs, event_id, recorded_at, seq, target, trace_id)
            ).encode("utf-8")
        else:
            body = entry_bytes(
                seq, event_id, recorded_at, actor, action, target, data_jcs, trace_id
            )
        digest = sha(prev.encode("ascii") + body).hexdigest()
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
    hash at that size.
    """
    st = state or VerifyState()
    expected = expect_hash_at or {}
    sha = _sha256
    enc = _encode
    needs_escape = _NEEDS_ESCAPE
    seq_expected = st.last_seq + 1
    prev = st.last_hash
    before = st.before_last_hash
    checked = st.checked
    segment_start = segment and checked == 0 and st.last_seq == 0
    for row in rows:
        seq, event_id, recorded_at, actor, action, target, data, trace_id, prev_hash, digest = row
        if segment_start:
            # An exported segment may start after seq 1: its first prev_hash is taken as given
            # (a signed checkpoint at seq-1, when present, vouches for it).
            segment_start = False
            if seq != 1:
                seq_expected, prev = seq, prev_hash
                if seq - 1 in expected and expected[seq - 1] != prev_hash:
                    return st, Problem(
                        seq, f"prev_hash does not match the checkpoint signed at size {seq - 1}"
                    )
        if seq != seq_expected:
            st.checked, st.last_seq, st.last_hash, st.before_last_hash = (
                checked,
                seq_expected - 1,
                prev,
                before,
            )
            if seq > seq_expected:
                return st, Problem(
                    seq_expected, f"missing: the chain jumps from seq {seq_expected - 1} to {seq}"
                )
            return st, Problem(seq, f"out of order: seq {seq} follows seq {seq_expected - 1}")
        if prev_hash != prev:
            st.checked, st.last_seq, st.last_hash, st.before_last_hash = (
                checked,
                seq - 1,
                prev,
                before,
            )
            if seq > 1 and prev_hash == before:
                return st, Problem(
                    seq - 1,
                    f"inserted: seq {seq} links to seq {seq - 2}, so seq {seq - 1} is not the original entry",
                )
            return st, Problem(seq, f"prev_hash does not link to the hash of seq {seq - 1}")
        if needs_escape(action + actor + event_id + recorded_at + target + trace_id) is None:
            # Nothing to escape: each string's JSON form is the string in quotes (RFC 8785 3.2.2.2).
            body = (
                '{"action":"%s","actor":"%s","data":%s,"event_id":"%s","recorded_at":"%s",'  # noqa: UP031 - fastest
                '"seq":%d,"target":"%s","trace_id":"%s"}'
                % (action, actor, data, event_id, recorded_at, seq, target, trace_id)
            )
        else:
            body = (
                '{"action":%s,"actor":%s,"data":%s,"event_id":%s,"recorded_at":%s,'  # noqa: UP031 - fastest
                '"seq":%d,"target":%s,"trace_id":%s}'
                % (
                    enc(action),
                    enc(actor),
                    data,
                    enc(event_id),
                    enc(recorded_at),
                    seq,
                    enc(target),
                    enc(trace_id),
                )
            )
        if sha((prev + body).encode("utf-8")).hexdigest() != digest:
            st.checked, st.last_seq, st.last_hash, st.before_last_hash = (
                checked,
                seq - 1,
                prev,
                before,
            )
            return st, Problem(seq, "contents do not match the stored hash (edited or swapped)")
        if seq in expected and expected[seq] != digest:
            st.checked, st.last_seq, st.last_hash, st.before_last_hash = (
                checked,
                seq - 1,
                prev,
                before,
            )
            return st, Problem(seq, f"hash differs from the checkpoint signed at size {seq}")
        before, prev = prev, digest
        seq_expected = seq + 1
        checked += 1
    st.checked, st.last_seq, st.last_hash, st.before_last_hash = (
        checked,
        seq_expected - 1,
        prev,
        before,
    )
    return st, None


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
