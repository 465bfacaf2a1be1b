"""The offline verifier tells a wrong key from a broken export: a well-formed key that signed
none of the checkpoints (another log's, or a rotated one) exits 2 and says so; the right key
with a forged signature is a broken export (exit 1)."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.db import transaction

from audit.chain import notes
from audit.export.lines import jsonl_lines
from audit.export.verify import main
from audit.selectors import export_segment
from audit.services import public_key_path

pytestmark = pytest.mark.django_db


@pytest.fixture
def export(log300, tmp_path):
    with transaction.atomic():
        text = "".join(jsonl_lines(export_segment(None, None), None, None))
    path = tmp_path / "export.jsonl"
    path.write_text(text)
    return path


def _key_file(tmp_path, text: str):
    path = tmp_path / f"key-{abs(hash(text))}.pub"
    path.write_text(text + "\n")
    return path


def _origin() -> str:
    return notes.parse_verifier_key(public_key_path().read_text())[0]


def test_the_log_s_own_key_verifies(export, capsys):
    assert main([str(export), "--public-key", str(public_key_path())]) == 0
    assert "export intact: 300 entries" in capsys.readouterr().out


def test_another_key_under_the_same_name_is_a_wrong_key_not_a_broken_export(
    export, tmp_path, capsys
):
    other = notes.verifier_key(_origin(), Ed25519PrivateKey.generate().public_key())
    assert main([str(export), "--public-key", str(_key_file(tmp_path, other))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wrong public key") and "none of the 3 checkpoints" in err
    assert "BROKEN" not in err


def test_another_log_s_key_names_the_export_s_log(export, tmp_path, capsys):
    other = notes.verifier_key("other.example/log", Ed25519PrivateKey.generate().public_key())
    assert main([str(export), "--public-key", str(_key_file(tmp_path, other))]) == 2
    err = capsys.readouterr().err
    assert "'other.example/log'" in err and f"the export is of the log {_origin()!r}" in err


def _forge(note: str) -> str:
    """The note with its signature's last byte flipped: the key id stays, it no longer verifies."""
    body, _, sig_line = note.rstrip("\n").rpartition("\n")
    prefix, _, blob = sig_line.rpartition(" ")
    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1
    return f"{body}\n{prefix} {base64.b64encode(bytes(raw)).decode()}\n"


def test_the_right_key_with_a_forged_signature_is_a_broken_export(export, capsys):
    docs = [json.loads(line) for line in export.read_text().splitlines()]
    last = max(d["size"] for d in docs if d["type"] == "checkpoint")
    for doc in docs:
        if doc["type"] == "checkpoint" and doc["size"] == last:
            doc["note"] = _forge(doc["note"])
    export.write_text("".join(json.dumps(d) + "\n" for d in docs))
    assert main([str(export), "--public-key", str(public_key_path())]) == 1
    assert "BROKEN at seq 300" in capsys.readouterr().err
