"""The web process's tile cache never serves a stale or partial tile: a partial tile that fills up,
a tree rolled back or replaced at the same (level, index), two databases; and proofs over cached
tiles are the ones the database alone gives, in one round trip."""

from __future__ import annotations

import base64
import json
import random
import uuid

import pytest
from django.db import transaction

from audit import chain, selectors
from audit.models import ChainEvent, Checkpoint
from audit.services import chain_append
from audit.tree import merkle, serving
from audit.tree.cache import Anchor, TileCache, TileHashes
from tests.audit.conftest import wipe_chain

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def public_log(settings):
    settings.KILN_AUDIT_TLOG_PUBLIC = True
    serving.CACHE.clear()
    yield
    serving.CACHE.clear()


def append(count: int, tag: str = "") -> None:
    """`count` entries appended by the writer's one write (tiles included)."""
    head = ChainEvent.objects.count()
    messages = [
        (f"{i}-0", json.dumps({"event_id": str(uuid.uuid4()), "recorded_at": "2026-12-01T00:00:00.000000Z",
                               "actor": "bench", "action": "audit.test.appended", "target": f"t:{i}",
                               "data": json.dumps({"i": i, "tag": tag}), "trace_id": ""}).encode())
        for i in range(head, head + count)
    ]  # fmt: skip
    chain_append(messages=messages)


def leaves() -> list[bytes]:
    return [
        merkle.leaf_hash(chain.entry_bytes(r.seq, str(r.event_id), chain.format_time(r.recorded_at),
                                           r.actor, r.action, r.target, r.data, r.trace_id))
        for r in ChainEvent.objects.order_by("seq")
    ]  # fmt: skip


def get_tile(client, path: str):
    return client.get(f"/audit/tlog/tile/{path}")


def test_a_partial_tile_that_fills_up_is_served_full_and_never_as_its_partial_copy(client):
    append(5)
    first = leaves()
    assert get_tile(client, "0/000.p/5").content == b"".join(first)  # cached, width 5
    missing = get_tile(client, "0/000")
    assert missing.status_code == 404 and "does not hold 256 hashes" in missing.json()["message"]
    assert get_tile(client, "0/000.p/6").status_code == 404
    append(251)
    whole = leaves()
    full = get_tile(client, "0/000")
    assert full.status_code == 200 and full.content == b"".join(whole) and len(full.content) == 8192
    assert get_tile(client, "0/000.p/5").content == b"".join(whole[:5])
    assert get_tile(client, "1/000.p/1").content == merkle.subtree_root(b"".join(whole))
    append(1)  # the tile is full: its cached copy stays what the database holds
    assert get_tile(client, "0/000").content == bytes(
        selectors.tile_hashes(level=0, index=0, width=256)
    )


def test_a_new_tree_at_the_same_level_and_index_is_never_served_from_the_old_ones_copy(client):
    append(300, "old")
    old = get_tile(client, "0/000").content
    old_proof = client.get("/api/v1/audit/proofs/inclusion?seq=7&size=300").json()
    wipe_chain()  # the tree is emptied behind the triggers' back
    append(300, "new")
    new = get_tile(client, "0/000").content
    assert new == b"".join(leaves()[:256]) and new != old
    proof = client.get("/api/v1/audit/proofs/inclusion?seq=7&size=300").json()
    assert proof["root"] != old_proof["root"]
    assert base64.b64decode(proof["root"]) == selectors.tree_root(size=300)
    merkle.verify_inclusion(6, 300, leaves()[6], [base64.b64decode(p) for p in proof["proof"]],
                            base64.b64decode(proof["root"]))  # fmt: skip


def test_a_tile_read_inside_a_rolled_back_transaction_is_not_served_afterwards(client):
    append(100)

    class RolledBack(Exception):
        pass

    with pytest.raises(RolledBack), transaction.atomic():
        append(200, "rolled back")
        assert get_tile(client, "0/000").status_code == 200  # cached from the uncommitted tree
        assert client.get("/api/v1/audit/proofs/inclusion?seq=260&size=300").status_code == 200
        raise RolledBack
    assert get_tile(client, "0/000").status_code == 404  # 100 entries again
    assert client.get("/api/v1/audit/proofs/inclusion?seq=260&size=300").status_code == 400
    append(200, "kept")
    assert get_tile(client, "0/000").content == b"".join(leaves()[:256])
    proof = client.get("/api/v1/audit/proofs/inclusion?seq=260&size=300").json()
    assert base64.b64decode(proof["root"]) == selectors.tree_root(size=300)


def test_proofs_over_cached_tiles_are_the_databases_while_the_tree_grows():
    rng = random.Random(17)
    for step in (1, 40, 215, 1, 300, 543):  # tiles fill and right edges move between the steps
        append(step)
        size = ChainEvent.objects.count()
        for _ in range(12):
            at = rng.randint(1, size)
            seq = rng.randint(1, at)
            assert serving.event_inclusion(seq=seq, size=at) == selectors.event_inclusion(
                seq=seq, size=at
            ), (seq, at)
            old = rng.randint(1, at)
            assert serving.consistency_proof(old=old, new=at) == selectors.consistency_proof(
                old=old, new=at
            ), (old, at)
    assert serving.event_inclusion(seq=size) == selectors.event_inclusion(seq=size)


def test_a_tile_or_a_proof_is_one_round_trip(client, django_assert_num_queries, monkeypatch):
    append(700)
    Checkpoint.objects.create(size=700, head_hash="0" * 64, root_hash="ab" * 32,
                              signed_at="2026-12-01T00:00:00Z", note="note\n")  # fmt: skip
    reads, real = [], serving._read
    monkeypatch.setattr(serving, "_read", lambda *a: reads.append(a) or real(*a))
    for path in (
        "/audit/tlog/tile/0/001",
        "/api/v1/audit/proofs/inclusion?seq=300&size=700",
        "/api/v1/audit/proofs/consistency?from=20&to=700",
        "/audit/tlog/tile/0/002.p/188",
    ):
        for warm in (False, True):
            reads.clear()
            with django_assert_num_queries(0):  # nothing through Django's cursor either
                assert client.get(path).status_code == 200, path
            assert len(reads) == 1, (path, warm)
            if warm:  # the tiles came from the cache: the statement read none of them
                assert reads[0][0] == [], path
    inclusion = client.get("/api/v1/audit/proofs/inclusion?seq=300&size=700").json()
    assert inclusion["checkpoint"] == "note\n"


# --- the cache alone ----------------------------------------------------------------------------


def _tile(seed: int, width: int = 256) -> TileHashes:
    return TileHashes(b"".join(merkle.leaf_hash(f"{seed}:{i}".encode()) for i in range(width)))


def test_two_databases_keep_their_own_tiles_at_the_same_level_and_index():
    cache = TileCache()
    a, b = cache.anchor("db-a"), cache.anchor("db-b")
    assert cache.store("db-a", a, {(0, 3): _tile(1)}, seq=1024, chain_hash="aa")
    assert cache.get("db-b", b, 0, 3, 256) is None
    assert cache.store("db-b", b, {(0, 3): _tile(2)}, seq=1024, chain_hash="bb")
    a, b = cache.anchor("db-a"), cache.anchor("db-b")
    assert cache.get("db-a", a, 0, 3, 256).hashes == _tile(1).hashes
    assert cache.get("db-b", b, 0, 3, 256).hashes == _tile(2).hashes
    cache.invalidate("db-a", a)  # a's tree changed: b's tiles stay
    assert cache.get("db-a", cache.anchor("db-a"), 0, 3, 256) is None
    assert cache.get("db-b", b, 0, 3, 256) is not None and len(cache) == 1


def test_a_width_is_part_of_the_key_and_a_stale_reader_stores_nothing():
    cache = TileCache()
    seen = cache.anchor("db")
    assert cache.store("db", seen, {(0, 0): _tile(1, 5)}, seq=5, chain_hash="h5")
    now = cache.anchor("db")
    assert now == Anchor(seen.epoch, 5, "h5")
    assert cache.get("db", now, 0, 0, 256) is None and cache.get("db", now, 0, 0, 6) is None
    assert cache.get("db", now, 0, 0, 5).width == 5
    # a reader that checked the old anchor and read above it: refused, nothing kept
    assert not cache.store("db", seen, {(0, 1): _tile(3)}, seq=512, chain_hash="h512")
    assert cache.get("db", cache.anchor("db"), 0, 1, 256) is None
    cache.invalidate("db", now)
    assert not cache.store("db", now, {(0, 0): _tile(1)}, seq=256, chain_hash="h256")
    assert len(cache) == 0


def test_the_cache_is_bounded_least_recently_used_first():
    cache = TileCache(capacity=2)
    for i in range(2):
        cache.store(
            "db", cache.anchor("db"), {(0, i): _tile(i)}, seq=256 * (i + 1), chain_hash=f"h{i}"
        )
    cache.get("db", cache.anchor("db"), 0, 0, 256)  # 0/0 used last
    cache.store("db", cache.anchor("db"), {(0, 2): _tile(2)}, seq=768, chain_hash="h2")
    anchor = cache.anchor("db")
    assert len(cache) == 2 and cache.get("db", anchor, 0, 1, 256) is None
    assert cache.get("db", anchor, 0, 0, 256) is not None and cache.get("db", anchor, 0, 2, 256)


@pytest.mark.parametrize("width", [1, 2, 5, 128, 255, 256])
def test_a_tiles_subtrees_are_the_trees_hashes(width):
    tile = _tile(9, width)
    hashes = [tile.hashes[i : i + 32] for i in range(0, len(tile.hashes), 32)]
    whole = merkle.memory_source(hashes)
    for rise in range(9):
        for position in range(width >> rise):
            assert tile.subtree(rise, position) == whole(rise, position)
        assert tile.subtree(rise, width >> rise) is None  # past the hashes it holds
