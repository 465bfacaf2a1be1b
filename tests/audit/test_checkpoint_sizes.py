"""A checkpoint's size line is ASCII decimal digits of bounded length (C2SP tlog-checkpoint, a u64):
anything else is a parse error that the cosignature intake answers with a 400, the standalone
verifier reports as NOT VERIFIED and a witness refuses, never an uncaught ValueError."""

from __future__ import annotations

import base64
import json
import logging

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.test import Client

from audit import record, witness
from audit.chain import notes
from audit.models import Checkpoint, Cosignature
from audit.tree import tlog_verify
from tests.audit.conftest import drain

ORIGIN = "kiln.test/audit"
LOG_KEY = Ed25519PrivateKey.generate()
LOG_VKEY = notes.verifier_key(ORIGIN, LOG_KEY.public_key())
ROOT = base64.b64encode(b"\x07" * 32).decode()
REASON = "is not an ASCII decimal number of at most 20 digits"

HOSTILE_SIZES = [
    "\u00b2",  # superscript two: str.isdigit() says yes, int() says no
    "\u0661",  # Arabic-Indic one
    "\uff11",  # fullwidth one
    "9" * 5000,  # int() refuses 4,300 digits and more
    "1" * 21,  # longer than a u64
    "18446744073709551616",  # 2^64: 20 digits, one past a u64
    "007",
    "-1",
    " 1",
    "",
]
HOSTILE_IDS = ["superscript", "arabic-indic", "fullwidth", "5000-digits", "21-digits", "2^64",
               "leading-zeros", "negative", "space", "empty"]  # fmt: skip


def signed(size: str, key: Ed25519PrivateKey = LOG_KEY) -> str:
    """A note signed by `key` whose size line is `size` as written: what a hostile log can serve."""
    statement = notes.Checkpoint(ORIGIN, size, "ab" * 32, "2026-12-01T00:00:00Z", "cd" * 32)  # type: ignore[arg-type]
    return notes.sign(statement, ORIGIN, key)


@pytest.mark.parametrize("size", HOSTILE_SIZES, ids=HOSTILE_IDS)
def test_a_size_that_is_not_a_bounded_ascii_decimal_is_a_note_error(size):
    with pytest.raises(tlog_verify.NoteError, match=REASON):
        tlog_verify.parse_checkpoint(f"{ORIGIN}\n{size}\n{ROOT}\n")


@pytest.mark.parametrize(
    ("size", "expected"),
    [("0", 0), ("1", 1), ("300", 300), ("18446744073709551615", 2**64 - 1)],
    ids=["zero", "one", "three-hundred", "u64-max"],
)
def test_ascii_decimal_sizes_up_to_a_u64_parse(size, expected):
    assert tlog_verify.parse_checkpoint(f"{ORIGIN}\n{size}\n{ROOT}\n").size == expected


@pytest.mark.django_db
@pytest.mark.parametrize("size", HOSTILE_SIZES[:-1], ids=HOSTILE_IDS[:-1])  # "": no size line
def test_the_cosignature_intake_answers_a_bad_size_with_a_400_and_stores_nothing(size, caplog):
    record("alice", "portal.environment.approved", "env:1", {"i": 1})
    drain()
    before = list(Checkpoint.objects.values_list("id", flat=True))
    caplog.set_level(logging.WARNING)
    note = f"{ORIGIN}\n{size}\n{ROOT}\n\n\u2014 w1 {base64.b64encode(b'x' * 76).decode()}\n"
    response = Client().post("/audit/tlog/cosignature", note.encode(), content_type="text/plain")
    assert response.status_code == 400, response.content[:300]
    assert REASON in response.json()["message"]
    assert not Cosignature.objects.exists()
    assert list(Checkpoint.objects.values_list("id", flat=True)) == before
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.django_db
def test_a_u64_size_this_log_never_signed_is_a_404_not_a_database_error(caplog):
    caplog.set_level(logging.WARNING)
    note = f"{ORIGIN}\n{2**64 - 1}\n{ROOT}\n\n\u2014 w1 {base64.b64encode(b'x' * 76).decode()}\n"
    response = Client().post("/audit/tlog/cosignature", note.encode(), content_type="text/plain")
    assert response.status_code == 404, response.content[:300]
    assert "signed no checkpoint of size 18446744073709551615" in response.json()["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize("size", HOSTILE_SIZES[:6], ids=HOSTILE_IDS[:6])
def test_the_verifier_reports_a_signed_bad_size_as_not_verified(size):
    with pytest.raises(tlog_verify.VerificationError, match=REASON):
        tlog_verify.verify_checkpoint(signed(size), LOG_VKEY)
    bundle = {"index": 0, "entry": '{"seq":1}', "proof": [], "checkpoint": signed(size)}
    with pytest.raises(tlog_verify.VerificationError, match=REASON):
        tlog_verify.verify_bundle(bundle, LOG_VKEY)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"index": "\u00b2"}, "is not a leaf index"),
        ({"index": "3"}, "is not a leaf index"),
        ({"index": -1}, "is not a leaf index"),
        ({"index": True}, "is not a leaf index"),
        ({"entry": 7}, "is not text"),
        ({"entry": "\ud800"}, "is not UTF-8 text"),
        ({"checkpoint": ["not", "a", "note"]}, "is not text"),
    ],
    ids=["unicode-digit", "string", "negative", "bool", "entry-number", "lone-surrogate",
         "checkpoint-list"],
)  # fmt: skip
def test_the_verifier_reports_a_malformed_bundle_as_not_verified(tmp_path, change, says):
    bundle = {"index": 0, "entry": '{"seq":1}', "proof": [], "checkpoint": signed("1"), **change}
    with pytest.raises(tlog_verify.VerificationError, match=says):
        tlog_verify.verify_bundle(bundle, LOG_VKEY)
    path, key = tmp_path / "bundle.json", tmp_path / "log.pub"
    path.write_text(json.dumps(bundle))
    key.write_text(LOG_VKEY)
    assert tlog_verify.main(["--public-key", str(key), "bundle", str(path)]) == 1


@pytest.mark.parametrize("size", HOSTILE_SIZES[:6], ids=HOSTILE_IDS[:6])
def test_a_witness_refuses_a_signed_bad_size(size):
    with pytest.raises(witness.WitnessRefused, match=REASON):
        witness.witness_step(
            state=None, note=signed(size), log_key=LOG_VKEY, tiles=witness.tree_tiles(None)
        )


def test_a_witness_reports_a_log_answering_bytes_that_are_not_text(monkeypatch):
    log = witness.HttpLog("http://log.invalid")
    monkeypatch.setattr(log, "_call", lambda path, body=None: b"\xff\xfe not text")
    with pytest.raises(witness.LogUnavailable, match="not UTF-8 text"):
        log.checkpoint()
    with pytest.raises(witness.LogUnavailable, match="not JSON"):
        log.submit("note")
