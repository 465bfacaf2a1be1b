"""The pure modules: hash input is RFC 8785 byte for byte; checkpoints are C2SP signed notes."""

from __future__ import annotations

import base64
import hashlib
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit import chain
from audit.chain import notes

EVENT = {
    "event_id": "3f1c2a9e-0000-4000-8000-00000000abcd",
    "recorded_at": "2026-11-30T06:00:00.123456Z",
    "actor": "alice",
    "action": "portal.environment.approved",
    "target": "portal.environmentrequest:42",
    "trace_id": "0af7651916cd43dd8448eb211c80319c",
}


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"reason": "looks good", "n": 3},
        {"z": 1, "a": [1, 2, {"y": None, "b": True}]},
        {"float": 1.5, "tiny": 1e-7, "big": 1e21, "neg": -0.0},
        {"unicode": "Zürich € \u2028 😀", "ctrl": "tab\tnl\n\u0001\u007f", "quote": '"\\'},
        {"é": 1, "e": 2, "\U0001f600": 3, "\ufb01": 4},
    ],
    ids=["empty", "plain", "nested", "numbers", "escapes", "key-order-utf16"],
)
def test_entry_bytes_are_rfc8785_of_the_entry(data):
    data_jcs = chain.canonical_data(data)
    entry = {**EVENT, "seq": 7, "data": data}
    expected = rfc8785.dumps(entry)
    got = chain.entry_bytes(
        7,
        EVENT["event_id"],
        EVENT["recorded_at"],
        EVENT["actor"],
        EVENT["action"],
        EVENT["target"],
        data_jcs,
        EVENT["trace_id"],
    )
    assert got == expected
    # hash = SHA-256(prev_hash as 64 ASCII hex digits || JCS bytes)
    prev = "ab" * 32
    assert chain.entry_hash(prev, got) == hashlib.sha256(prev.encode() + expected).hexdigest()


def test_format_time_is_utc_with_microseconds():
    moment = datetime(2026, 1, 2, 4, 5, 6, tzinfo=timezone(timedelta(hours=1)))
    assert chain.format_time(moment) == "2026-01-02T03:05:06.000000Z"
    with pytest.raises(ValueError):
        chain.format_time(datetime(2026, 1, 2))


def _chain(n: int) -> list[chain.Entry]:
    events = [
        (str(uuid.UUID(int=i)), "2026-01-01T00:00:00.000000Z", "a", "x.y.z", f"t{i}", "{}", "")
        for i in range(n)
    ]
    return list(chain.build_entries(0, chain.GENESIS_HASH, events))


def test_verify_rows_accepts_an_intact_chain_and_checks_checkpoints():
    entries = _chain(5)
    state, problem = chain.verify_rows(
        [e.as_row() for e in entries], expect_hash_at={5: entries[4].hash}
    )
    assert problem is None and state.checked == 5 and state.last_hash == entries[4].hash
    _, problem = chain.verify_rows([e.as_row() for e in entries], expect_hash_at={3: "0" * 64})
    assert problem.seq == 3 and "checkpoint" in problem.reason


def test_verify_rows_rejects_a_chain_not_starting_at_one_unless_a_segment():
    rows = [e.as_row() for e in _chain(5)][2:]
    assert chain.verify_rows(rows)[1].seq == 1
    assert chain.verify_rows(rows, segment=True)[1] is None


def test_checkpoint_beyond_the_head_means_truncation():
    assert chain.check_checkpoint_sizes(10, [5, 12]).seq == 11
    assert chain.check_checkpoint_sizes(12, [5, 12]) is None


def test_signed_note_round_trip_and_format():
    key = Ed25519PrivateKey.generate()
    cp = notes.Checkpoint("kiln.local/audit", 42, "11" * 32, "2026-11-30T06:00:00Z")
    note = notes.sign(cp, "kiln.local/audit", key)
    body, sig = note.split("\n\n")
    assert (
        body
        == f"kiln.local/audit\n42\n{base64.b64encode(bytes.fromhex('11' * 32)).decode()}\ntime 2026-11-30T06:00:00Z"
    )
    assert sig.startswith("\u2014 kiln.local/audit ") and sig.endswith("\n")
    blob = base64.b64decode(sig.split(" ")[-1])
    raw = notes.public_raw(key.public_key())
    assert (
        blob[:4] == hashlib.sha256(b"kiln.local/audit\n\x01" + raw).digest()[:4] and len(blob) == 68
    )
    vkey = notes.verifier_key("kiln.local/audit", key.public_key())
    name, public = notes.parse_verifier_key(vkey)
    assert notes.verify(note, name, public) == cp


@pytest.mark.parametrize(
    "edit",
    [
        lambda n: n.replace("\n42\n", "\n43\n"),
        lambda n: n.replace("time 2026", "time 2027"),
        lambda n: n[:-10] + "AAAAAAAAA\n",
    ],
    ids=["size", "time", "signature"],
)
def test_an_edited_note_does_not_verify(edit):
    key = Ed25519PrivateKey.generate()
    note = notes.sign(notes.Checkpoint("o", 42, "11" * 32, "2026-11-30T06:00:00Z"), "o", key)
    with pytest.raises(notes.NoteError):
        notes.verify(edit(note), "o", key.public_key())


def test_a_note_signed_by_another_key_does_not_verify():
    note = notes.sign(notes.Checkpoint("o", 1, "11" * 32, "t"), "o", Ed25519PrivateKey.generate())
    with pytest.raises(notes.NoteError, match="no signature"):
        notes.verify(note, "o", Ed25519PrivateKey.generate().public_key())


def test_time_text():
    assert (
        notes.time_text(datetime(2026, 11, 30, 6, 0, 1, 999, tzinfo=UTC)) == "2026-11-30T06:00:01Z"
    )


@pytest.mark.parametrize(
    "data",
    [
        {"b": 1, "a": {"d": [True, False, None], "c": "x"}},
        {"ünï": "cødé", "a": "\u2028\U0001f600"},
        {"n": 2**53 - 1, "m": -(2**53) + 1},
        {"f": 0.1, "g": [1e300, -5e-324]},
        {"\U0001f600": 1, "\ufb01": 2},
    ],
    ids=["plain", "non-ascii", "safe-ints", "floats", "astral-keys"],
)
def test_canonical_data_matches_rfc8785_on_every_path(data):
    assert chain.canonical_data(data) == rfc8785.dumps(data).decode()


@pytest.mark.parametrize(
    "data", [{"n": 2**53}, {"s": "\ud800"}, {"x": float("inf")}], ids=["int", "surrogate", "inf"]
)
def test_values_without_canonical_form_are_refused(data):
    with pytest.raises(chain.CanonicalError):
        chain.canonical_data(data)


@pytest.mark.parametrize(
    "data",
    [
        {"b": 1, "a": "x", "c": None, "d": True},
        {"b": {"z": [1, {"y": False}]}, "a": []},
        {"ü": 1},
        {"f": 1.5},
        [{"b": 2, "a": 1}],
    ],
    ids=["flat", "nested", "non-ascii-key", "float", "list"],
)
def test_canonical_data_of_flat_nested_and_list_data_is_rfc8785(data):
    assert chain.canonical_data(data) == rfc8785.dumps(data).decode()


@pytest.mark.parametrize("data", [{"s": "\udc00"}, {1: "int key"}], ids=["surrogate", "int-key"])
def test_canonical_data_refuses_lone_surrogates_and_non_string_keys(data):
    with pytest.raises(chain.CanonicalError):
        chain.canonical_data(data)
