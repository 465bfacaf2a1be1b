"""audit_verify checks the Merkle tree too: rebuilt from the chain's leaves, compared with every
stored tile and every checkpoint's signed root, the first disagreeing place named."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from audit.chain import notes
from audit.models import Checkpoint, MerkleTile, VerificationRun
from audit.services import signing_key
from audit.tree import merkle
from audit.tree.verification import tile_difference

pytestmark = pytest.mark.django_db


def verify() -> tuple[int, dict]:
    out = StringIO()
    try:
        call_command("audit_verify", "--json", "--no-anchors", stdout=out)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, json.loads(out.getvalue())


def tiles_sql(*statements: tuple[str, list]) -> None:
    """Change the stored tiles behind their triggers' back, as a superuser tamperer would."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_merkletile DISABLE TRIGGER USER")
        try:
            for sql, params in statements:
                cursor.execute(sql, params)
        finally:
            cursor.execute("ALTER TABLE audit_merkletile ENABLE TRIGGER USER")


def test_an_intact_tree_agrees_with_the_chain_tile_by_tile_and_root_by_root(log300):
    code, out = verify()
    assert code == 0 and out["ok"]
    # 300 leaves: tile 0/0 (full), 0/1 (44 hashes), 1/0 (1 hash); roots of sizes 100, 200, 300.
    assert out["tree"] == {
        "ok": True,
        "leaves": 300,
        "tiles": 3,
        "signed_roots": 3,
        "problem": None,
    }
    run = VerificationRun.objects.get()
    assert run.ok and "tree: 3 tiles and 3 signed roots agree with 300 entries" in run.message


@pytest.mark.parametrize(
    ("statement", "seq", "reason"),
    [
        (("UPDATE audit_merkletile SET hashes = overlay(hashes placing %s from 97) "
          "WHERE level = 0 AND index = 0", [b"\x07" * 32]), 4,
         "tile 0/0, hash 3: not the leaf hash of the chain's entry at seq 4"),
        (("UPDATE audit_merkletile SET hashes = overlay(hashes placing %s from 1) "
          "WHERE level = 1 AND index = 0", [b"\x07" * 32]), 1,
         "tile 1/0, hash 0: not the tree of the chain's entries at seq 1..256"),
        (("UPDATE audit_merkletile SET hashes = substring(hashes from 1 for 320) "
          "WHERE level = 0 AND index = 1", []), 267,
         "tile 0/1 holds 10 hashes where the chain's tree has 44"),
        (("DELETE FROM audit_merkletile WHERE level = 0 AND index = 1", []), 257,
         "tile 0/1 is missing"),
        (("INSERT INTO audit_merkletile (level, index, hashes) VALUES (0, 7, %s)", [b"\x01" * 32]), 301,
         "tile 0/7 is not in the chain's tree of 300 entries"),
    ],
    ids=["leaf-rewritten", "subtree-rewritten", "tile-truncated", "tile-deleted", "tile-ahead"],
)  # fmt: skip
def test_a_tampered_tile_is_named_with_the_first_seq_below_it(log300, statement, seq, reason):
    tiles_sql(statement)
    code, out = verify()
    assert code == 1 and not out["ok"]
    assert out["first_bad_seq"] == seq and reason in out["problem"]
    assert out["tree"]["problem"] == reason or reason in out["tree"]["problem"]


def test_a_checkpoint_signing_a_root_that_is_not_the_chain_s_tree_is_named(log300, settings):
    # The log's own key signs size 200 with another root: a fork the chain's entries disprove.
    real = Checkpoint.objects.get(size=200)
    signed = notes.parse(real.note)[0]
    forged = notes.Checkpoint(signed.origin, 200, signed.head_hash, signed.time, "ab" * 32)
    note = notes.sign(forged, settings.KILN_AUDIT_ORIGIN, signing_key())
    bad = Checkpoint.objects.create(size=200, head_hash=signed.head_hash, root_hash="ab" * 32,
                                    signed_at=real.signed_at, note=note)  # fmt: skip
    code, out = verify()
    assert code == 1 and out["first_bad_seq"] == 200
    assert (
        f"checkpoint #{bad.id} at size 200: its signed Merkle root is not the root of the chain's entries 1..200"
        in out["problem"]
    )


def test_a_stored_root_that_is_not_the_one_its_note_signs_is_named(log300):
    Checkpoint.objects.filter(size=100).update(root_hash="cd" * 32)
    code, out = verify()
    assert code == 1 and "its stored root is not the root its note signs" in out["problem"]


def test_an_edited_chain_row_is_named_by_the_chain_check_first(log300, tamper):
    tamper(("UPDATE audit_chainevent SET actor = 'mallory' WHERE seq = 42", []))
    code, out = verify()
    assert code == 1 and out["first_bad_seq"] == 42
    assert "contents do not match" in out["problem"]
    assert "hash 41: not the leaf hash of the chain's entry at seq 42" in out["tree"]["problem"]


def test_the_tree_check_can_be_skipped(log300):
    tiles_sql(("DELETE FROM audit_merkletile WHERE level = 1", []))
    out = StringIO()
    call_command("audit_verify", "--json", "--no-anchors", "--no-tree", stdout=out)
    assert json.loads(out.getvalue())["tree"] is None


@pytest.mark.parametrize(
    ("level", "index", "j", "seqs"),
    [(0, 0, 0, "seq 1"), (0, 2, 5, "seq 518"), (1, 0, 3, "seq 769..1024"), (2, 1, 0, "seq 16777217..")],
    ids=["first-leaf", "leaf-518", "level1", "level2"],
)  # fmt: skip
def test_tile_difference_names_the_seqs_under_the_hash(level, index, j, seqs):
    # Hash j of tile L/N is the subtree of height 8L numbered 256N + j: leaves (256N + j) << 8L ...
    rebuilt = bytes(range(32)) * 8
    stored = bytearray(rebuilt)
    stored[j * 32] ^= 0xFF
    problem = tile_difference(level, index, bytes(stored), rebuilt)
    assert seqs in problem.reason
    assert problem.seq == ((index * merkle.TILE_WIDTH + j) << (8 * level)) + 1
    assert tile_difference(level, index, rebuilt, rebuilt) is None
    assert MerkleTile.objects.count() == 0  # a pure comparison
