"""The standalone verifier (audit/tree/tlog_verify.py): proof bundles, checkpoints, cosignatures, forks."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit import record
from audit.chain import notes
from audit.tree import merkle
from audit.tree import tlog_verify as tv
from tests.audit.conftest import drain

ROOT = Path(__file__).resolve().parents[2]
ORIGIN = "kiln.test/audit"
KEY = Ed25519PrivateKey.generate()
VKEY = notes.verifier_key(ORIGIN, KEY.public_key())


def _entries(n: int, *, rewrite: int | None = None) -> list[bytes]:
    return [
        json.dumps({"seq": i + 1, "v": "evil" if i == rewrite else i}).encode() for i in range(n)
    ]


def _checkpoint(entries: list[bytes], size: int) -> str:
    source = merkle.memory_source([merkle.leaf_hash(e) for e in entries])
    root = merkle.root(source, size).hex()
    return notes.sign(
        notes.Checkpoint(ORIGIN, size, "ab" * 32, "2026-12-01T00:00:00Z", root), ORIGIN, KEY
    )


def _bundle(entries: list[bytes], index: int, size: int, *, note: str | None = None) -> dict:
    source = merkle.memory_source([merkle.leaf_hash(e) for e in entries])
    proof = merkle.inclusion_proof(source, index, size)
    return {
        "index": index,
        "entry": entries[index].decode(),
        "proof": [base64.b64encode(p).decode() for p in proof],
        "checkpoint": note or _checkpoint(entries, size),
    }


def _consistency(entries: list[bytes], old: int, new: int) -> list[str]:
    source = merkle.memory_source([merkle.leaf_hash(e) for e in entries])
    return [base64.b64encode(p).decode() for p in merkle.consistency_proof(source, old, new)]


def test_the_verifier_imports_without_django_or_any_other_kiln_module():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys\n"
        "import audit.tree.tlog_verify\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'kiln', 'audit'))\n"
        "assert loaded == ['audit', 'audit.tree', 'audit.tree.tlog_verify'], loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_kiln_proves_and_verifies_with_the_verifier_s_own_functions():
    assert merkle.verify_inclusion is tv.verify_inclusion
    assert merkle.leaf_hash is tv.leaf_hash
    assert notes.NoteError is tv.NoteError and notes.parse_verifier_key is tv.parse_verifier_key


@pytest.mark.parametrize(("index", "size"), [(0, 1), (3, 7), (6, 7), (255, 300), (299, 300)])
def test_a_bundle_verifies_offline(index, size):
    entries = _entries(size)
    head = tv.verify_bundle(_bundle(entries, index, size), VKEY)
    assert head.size == size and head.origin == ORIGIN


def test_a_rewritten_entry_is_caught_with_its_index():
    entries = _entries(9)
    bundle = _bundle(entries, 4, 9)
    bundle["entry"] = _entries(9, rewrite=4)[4].decode()
    with pytest.raises(tv.VerificationError, match="entry at index 4 is not the one") as err:
        tv.verify_bundle(bundle, VKEY)
    assert err.value.index == 4


def test_a_truncated_tail_is_caught_with_the_first_missing_index():
    entries = _entries(8)
    bundle = _bundle(entries, 6, 8, note=_checkpoint(entries, 5))
    with pytest.raises(tv.VerificationError, match="index 6 is beyond .* size 5") as err:
        tv.verify_bundle(bundle, VKEY)
    assert err.value.index == 6
    with pytest.raises(tv.VerificationError, match="truncated.*index 5 on are gone") as err:
        tv.verify_checkpoints_consistent(_checkpoint(entries, 8), _checkpoint(entries, 5), [], VKEY)
    assert err.value.index == 5


@pytest.mark.parametrize(("old", "new"), [(6, 9), (4, 9), (9, 9)])
def test_a_forked_log_is_refused_naming_both_sizes(old, new):
    honest, forked = _entries(9), _entries(9, rewrite=3)  # the trees diverge at index 3
    proof = _consistency(forked, old, new)
    with pytest.raises(tv.VerificationError, match=f"forked.*size {new}.*size {old}") as err:
        tv.verify_checkpoints_consistent(
            _checkpoint(honest, old), _checkpoint(forked, new), proof, VKEY
        )
    assert err.value.index == old - 1
    old_head, new_head = tv.verify_checkpoints_consistent(
        _checkpoint(honest, old), _checkpoint(honest, new), _consistency(honest, old, new), VKEY
    )
    assert (old_head.size, new_head.size) == (old, new)


def test_a_checkpoint_signed_by_another_key_or_altered_is_refused():
    entries = _entries(3)
    other = Ed25519PrivateKey.generate()
    with pytest.raises(tv.VerificationError, match="no signature by key"):
        tv.verify_bundle(_bundle(entries, 0, 3), notes.verifier_key(ORIGIN, other.public_key()))
    note = _checkpoint(entries, 3).replace("\n3\n", "\n4\n", 1)
    with pytest.raises(tv.VerificationError, match="signature does not verify"):
        tv.verify_bundle(_bundle(entries, 0, 3, note=note), VKEY)


def _witness(name: str) -> tuple[Ed25519PrivateKey, str]:
    key = Ed25519PrivateKey.generate()
    raw = tv.raw_public(key.public_key())
    blob = base64.b64encode(bytes([tv.ALG_COSIGNATURE]) + raw).decode()
    return key, f"{name}+{tv.key_hash(name, raw, tv.ALG_COSIGNATURE).hex()}+{blob}"


def test_cosignatures_count_toward_a_quorum_and_a_bad_one_does_not():
    entries = _entries(5)
    note = _checkpoint(entries, 5)
    body = note.partition("\n\n")[0] + "\n"
    (k1, w1), (k2, w2), (_k3, w3) = _witness("w1.example"), _witness("w2.example"), _witness("w3")
    forged = tv.cosign(body.replace("\n5\n", "\n6\n"), "w2.example", k2, 1_700_000_000)
    cosigned = note + tv.cosign(body, "w1.example", k1, 1_700_000_000) + forged
    head = tv.verify_bundle(_bundle(entries, 2, 5, note=cosigned), VKEY, [w1, w2, w3], quorum=1)
    assert head.witnesses == ("w1.example",)
    assert tv.verify_cosignature(cosigned, "w1.example", tv.parse_verifier_key(w1, 4)[1]) == (
        1_700_000_000
    )
    with pytest.raises(tv.VerificationError, match=r"1 valid witness cosignatures \(w1.example\)"):
        tv.verify_bundle(_bundle(entries, 2, 5, note=cosigned), VKEY, [w1, w2, w3], quorum=2)


@pytest.mark.django_db
def test_kiln_s_proof_bundle_verifies_with_the_copied_script_alone(
    tmp_path, api_client_for, settings
):
    from audit.services import signing_key

    for i in range(5):
        record("alice", "portal.environment.approved", f"env:{i}", {"i": i})
    drain()
    bundle = api_client_for("auditor").get("/api/v1/audit/events/4/proof").json()
    script = tmp_path / "tlog_verify.py"  # anywhere, beside nothing else of Kiln
    shutil.copy(ROOT / "audit" / "tree" / "tlog_verify.py", script)
    key = tmp_path / "kiln-audit.pub"
    key.write_text(notes.verifier_key(settings.KILN_AUDIT_ORIGIN, signing_key().public_key()))
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(bundle))
    bad.write_text(json.dumps({**bundle, "entry": bundle["entry"].replace("env:3", "env:9")}))
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}

    def run(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(script), "--public-key", str(key), "bundle", str(path)],
            cwd=tmp_path, env=env, capture_output=True, text=True,
        )  # fmt: skip

    ok = run(good)
    assert ok.returncode == 0, ok.stderr
    assert "entry 3 is in the signed tree of size" in ok.stdout
    broken = run(bad)
    assert broken.returncode == 1
    assert "entry at index 3 is not the one the checkpoint" in broken.stderr


@pytest.mark.django_db
def test_verify_export_rebuilds_the_tree_and_names_a_checkpoint_whose_root_is_not_it(
    api_client_for, tmp_path, settings
):
    from audit.export.verify import verify_export
    from audit.services import public_key_path, signing_key

    for i in range(6):
        record("alice", "portal.environment.approved", f"env:{i}", {"i": i})
    drain()
    response = api_client_for("auditor").get("/api/v1/audit/export")
    text = b"".join(response.streaming_content).decode()
    path = tmp_path / "export.jsonl"
    path.write_text(text)
    assert verify_export(path, public_key_path().read_text()).ok
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    doc = next(d for d in lines if d["type"] == "checkpoint" and d["size"] == 6)
    cp = notes.parse(doc["note"])[0]  # same chain head, another tree: a split view, signed
    forged = notes.Checkpoint(cp.origin, cp.size, cp.head_hash, cp.time, "cd" * 32)
    doc["note"] = notes.sign(forged, settings.KILN_AUDIT_ORIGIN, signing_key())
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    report = verify_export(path, public_key_path().read_text())
    assert not report.ok and report.problem.seq == 6
    assert "Merkle root is not the tree of entries 1..6" in report.problem.reason
