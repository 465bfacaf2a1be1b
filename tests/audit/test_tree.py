"""The Merkle tree beside the chain: built by the writer in the append's transaction, tiles only grow."""

from __future__ import annotations

import base64
import sqlite3

import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError

from audit import chain, record, selectors, triggers
from audit.chain import notes
from audit.chain.verification import iter_rows
from audit.models import ChainEvent, MerkleTile
from audit.services.tree import tree_extend
from audit.tree import merkle
from kiln.errors import InvalidInput
from tests.audit.conftest import drain

pytestmark = pytest.mark.django_db


def _record(n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        record("alice", "portal.environment.approved", f"env:{i}", {"i": i})


def _leaves() -> list[bytes]:
    """The leaf hashes recomputed from the stored chain rows, independently of the tiles."""
    with transaction.atomic():
        return [
            merkle.leaf_hash(chain.entry_bytes(*row[:8])) for rows in iter_rows() for row in rows
        ]


def test_the_writer_builds_the_tree_of_the_chain_entries_across_batches(settings):
    # 300 entries in batches of 7, 256 and 37: the first leaf tile fills inside a batch.
    _record(7)
    drain()
    _record(256, 7)
    drain()
    _record(37, 263)
    drain()
    leaves = _leaves()
    assert len(leaves) == ChainEvent.objects.count() == 300 == selectors.tree_size()
    whole = merkle.memory_source(leaves)
    assert selectors.tree_root(size=300) == merkle.root(whole, 300)
    assert selectors.tree_root(size=7) == merkle.root(whole, 7)
    full = MerkleTile.objects.get(level=0, index=0)
    assert len(full.hashes) == 256 * 32 and bytes(full.hashes) == b"".join(leaves[:256])
    assert bytes(MerkleTile.objects.get(level=0, index=1).hashes) == b"".join(leaves[256:])
    assert bytes(MerkleTile.objects.get(level=1, index=0).hashes) == merkle.subtree_root(
        b"".join(leaves[:256])
    )
    size, proof, root = selectors.inclusion_proof(seq=42, size=263)
    merkle.verify_inclusion(41, 263, leaves[41], proof, root)
    new, proof, old_root, new_root = selectors.consistency_proof(old=7, new=300)
    merkle.verify_consistency(7, 300, old_root, new_root, proof)


@pytest.mark.parametrize(
    ("seq", "size", "reason"),
    [(0, 3, "seq 0 is not"), (4, 3, "seq 4 is not"), (1, 4, "size 4 is not"), (1, 0, "size 0")],
    ids=["seq-zero", "seq-past-size", "size-past-tree", "size-zero"],
)
def test_a_proof_outside_the_tree_is_refused_with_the_reason(seq, size, reason):
    _record(3)
    drain()
    with pytest.raises(InvalidInput, match=reason):
        selectors.inclusion_proof(seq=seq, size=size)


def test_a_rolled_back_append_leaves_no_tile_behind():
    _record(3)
    drain()
    before = {(t.level, t.index): bytes(t.hashes) for t in MerkleTile.objects.all()}
    entry = ChainEvent.objects.get(seq=3)
    with pytest.raises(RuntimeError), transaction.atomic():
        extra = next(chain.build_entries(3, entry.hash, [(
            "00000000-0000-0000-0000-000000000009", "2026-01-01T00:00:00.000000Z", "a", "x.y.z",
            "t", "{}", "",
        )]))  # fmt: skip
        tree_extend(size=3, entries=[extra])
        raise RuntimeError("the batch fails after the tiles were written")
    assert {(t.level, t.index): bytes(t.hashes) for t in MerkleTile.objects.all()} == before


def test_the_writer_refuses_to_extend_a_tree_whose_tiles_disagree_with_the_chain():
    _record(3)
    drain()
    head = ChainEvent.objects.get(seq=3)
    extra = next(chain.build_entries(3, head.hash, [(
        "00000000-0000-0000-0000-00000000000a", "2026-01-01T00:00:00.000000Z", "a", "x.y.z", "t",
        "{}", "",
    )]))  # fmt: skip
    with pytest.raises(ValueError, match="seq 4 is not the next one"):
        tree_extend(size=2, entries=[extra])
    # Tiles that ran ahead of the chain (one leaf more than it has) are refused, not built on.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE audit_merkletile SET hashes = hashes || %s WHERE level = 0", [b"\x01" * 32]
        )
        with pytest.raises(ValueError, match="must hold 3 hashes"):
            tree_extend(size=3, entries=[extra])
        transaction.set_rollback(True)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_merkletile SET hashes = substring(hashes from 33) WHERE level = 0",
        "UPDATE audit_merkletile SET hashes = overlay(hashes placing '\\x00'::bytea from 1) WHERE level = 0",
        "UPDATE audit_merkletile SET index = 7 WHERE level = 0",
        "DELETE FROM audit_merkletile",
        "TRUNCATE audit_merkletile",
    ],
    ids=["shrink", "rewrite-first-hash", "move", "delete", "truncate"],
)
def test_changing_a_tile_other_than_growing_it_is_rejected_by_the_database(sql):
    if connection.vendor != "postgresql":
        pytest.skip("the PostgreSQL triggers")  # SQLite has its own test below
    _record(3)
    drain()
    with pytest.raises(DatabaseError, match="Merkle tile"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql)
    with transaction.atomic(), connection.cursor() as cursor:  # growing is allowed
        cursor.execute(
            "UPDATE audit_merkletile SET hashes = hashes || %s WHERE level = 0", [b"\x01" * 32]
        )
        transaction.set_rollback(True)


def test_sqlite_tile_triggers_allow_growth_only():
    db = sqlite3.connect(":memory:")
    db.execute(
        'CREATE TABLE audit_merkletile (id INTEGER PRIMARY KEY, level INT, "index" INT, hashes BLOB)'
    )
    for sql in triggers.tile_statements("sqlite", create=True):
        db.execute(sql)
    db.execute(
        'INSERT INTO audit_merkletile (level, "index", hashes) VALUES (0, 0, ?)', [b"a" * 32]
    )
    db.execute("UPDATE audit_merkletile SET hashes = ?", [b"a" * 32 + b"b" * 32])
    for sql, params in [
        ("UPDATE audit_merkletile SET hashes = ?", [b"c" * 64]),
        ("UPDATE audit_merkletile SET hashes = ?", [b"a" * 32]),
        ('UPDATE audit_merkletile SET "index" = 1', []),
        ("DELETE FROM audit_merkletile", []),
    ]:
        with pytest.raises(sqlite3.DatabaseError, match="only grow"):
            db.execute(sql, params)
    assert db.execute("SELECT hashes FROM audit_merkletile").fetchone()[0] == b"a" * 32 + b"b" * 32


def test_a_checkpoint_carries_the_tree_root_and_the_chain_head(settings):
    from audit.models import Checkpoint
    from audit.services import signing_key

    _record(5)
    drain()
    cp = Checkpoint.objects.order_by("-size").first()
    assert cp.size == 5 and bytes.fromhex(cp.root_hash) == selectors.tree_root(size=5)
    lines = cp.note.split("\n")
    assert lines[2] == base64.b64encode(bytes.fromhex(cp.root_hash)).decode()
    assert lines[3] == "chain " + base64.b64encode(bytes.fromhex(cp.head_hash)).decode()
    signed = notes.verify(cp.note, settings.KILN_AUDIT_ORIGIN, signing_key().public_key())
    assert (signed.size, signed.root_hash, signed.head_hash) == (5, cp.root_hash, cp.head_hash)


def test_a_checkpoint_signed_before_the_tree_still_reads_as_the_chain_head(settings):
    from audit.services import signing_key

    old = notes.Checkpoint(settings.KILN_AUDIT_ORIGIN, 3, "ab" * 32, "2026-11-30T00:00:00Z")
    note = notes.sign(old, settings.KILN_AUDIT_ORIGIN, signing_key())
    assert note.split("\n")[3].startswith("time ")
    assert notes.verify(note, settings.KILN_AUDIT_ORIGIN, signing_key().public_key()) == old


def test_the_writer_refuses_to_sign_a_tree_that_forks_from_its_last_checkpoint(caplog):
    from audit.models import Checkpoint
    from audit.services import checkpoint_create
    from audit.services.tree import CheckpointRefused

    _record(5)
    drain()
    _record(3, 5)
    with connection.cursor() as cursor:  # a tamperer rewrites leaf 2 in the stored tile
        cursor.execute("ALTER TABLE audit_merkletile DISABLE TRIGGER USER")
        cursor.execute(
            "UPDATE audit_merkletile SET hashes = overlay(hashes placing %s from 65) "
            "WHERE level = 0 AND index = 0",
            [b"\x07" * 32],
        )
        cursor.execute("ALTER TABLE audit_merkletile ENABLE TRIGGER USER")
    drain()  # chains the three events; its checkpoint is refused and logged
    assert ChainEvent.objects.count() == 8
    assert list(Checkpoint.objects.values_list("size", flat=True)) == [5]
    assert "not consistent with the checkpoint at size 5" in caplog.text
    with pytest.raises(CheckpointRefused, match="not signing size 8"):
        checkpoint_create(force=True)
