"""The transparency log's hot reads for the web process: tiles and proofs from cached tiles, each
request one database round trip.

A tile or proof request names the tree size it is about, so it knows which tiles (and how many
hashes of each) it needs before it reads anything. What the cache (audit/tree/cache.py) does not
hold is read in one statement, together with the chain's hash at the cache's anchor (is the
cached tree still the database's?), the chain's row at the size asked (does the tree have it?)
and, for an inclusion proof, the checkpoint signed at that size with its cosignatures. The
answers are the ones `audit.selectors` computes from the database alone; the writer and the
verifiers keep reading the database (a tamperer's change must reach them, not a cached copy).
"""

from __future__ import annotations

import base64
from typing import Any

import psycopg
from django.db import connection

from audit import selectors
from audit.tree import merkle
from audit.tree.cache import Anchor, TileCache, TileHashes
from kiln.errors import InvalidInput, NotFound
from kiln.params import BIGINT_MAX

CACHE = TileCache()

TileWidths = dict[tuple[int, int], int]  # (tile level, tile index) -> hashes needed


def _database() -> tuple:
    """This connection's database, as the cache tells databases apart."""
    db = connection.settings_dict
    return (connection.alias, connection.vendor, db["NAME"], db.get("HOST"), db.get("PORT"))


class _Read:
    """What one statement returned: tiles, the chain's hashes at some seqs, a checkpoint note."""

    def __init__(self) -> None:
        self.tiles: dict[tuple[int, int], bytes] = {}
        self.chain: dict[int, str] = {}
        self.notes: dict[int, str] = {}  # checkpoint id -> its note
        self.lines: dict[int, list[str]] = {}  # checkpoint id -> cosignature lines, by witness

    def note(self) -> str | None:
        """The newest checkpoint's note with its witnesses' cosignature lines (None: none)."""
        if not self.notes:
            return None
        newest = max(self.notes)
        return self.notes[newest] + "".join(self.lines.get(newest, []))


# One statement's parts, each row (kind, a, b, hashes, text, witness); placeholders only.
TILES_SQL = 'SELECT 0, "level", "index", hashes, NULL, NULL FROM audit_merkletile WHERE '
TILE_KEY = '("level" = %s AND "index" = %s)'
CHAIN_SQL = "SELECT 1, seq, 0, NULL, hash, NULL FROM audit_chainevent WHERE seq IN (%s)"
CHECKPOINT_SQL = (
    "SELECT 2, id, 0, NULL, note, NULL FROM audit_checkpoint WHERE size = %s AND root_hash <> ''"
)
COSIGNATURES_SQL = (
    "SELECT 3, s.checkpoint_id, 0, NULL, s.line, s.witness FROM audit_cosignature s "
    "JOIN audit_checkpoint c ON c.id = s.checkpoint_id WHERE c.size = %s AND c.root_hash <> ''"
)


def _read(tiles: list[tuple[int, int]], seqs: list[int], checkpoint_size: int | None) -> _Read:
    """One statement (one snapshot, one round trip): the stored tiles, the chain's hashes at
    `seqs`, and the checkpoints with a root at `checkpoint_size` with their cosignatures."""
    parts, params = [], []
    if tiles:
        parts.append(TILES_SQL + " OR ".join([TILE_KEY] * len(tiles)))
        params += [v for key in tiles for v in key]
    parts.append(CHAIN_SQL % ", ".join(["%s"] * len(seqs)))
    params += seqs
    if checkpoint_size is not None:
        parts += [CHECKPOINT_SQL, COSIGNATURES_SQL]
        params += [checkpoint_size, checkpoint_size]
    sql = " UNION ALL ".join(parts) + " ORDER BY 1, 6"
    if connection.vendor == "postgresql":
        # A psycopg prepared statement on Django's own connection (as the outbox INSERT does,
        # audit/services/recording.py): planned once per connection and statement shape (a
        # few: how many tiles are missing), not per request; planning this UNION took longer
        # than running it.
        connection.ensure_connection()
        with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
            rows = cursor.execute(sql, params, prepare=True).fetchall()
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
    out = _Read()
    for kind, a, b, blob, text, _witness in rows:
        if kind == 0:
            out.tiles[(a, b)] = bytes(blob)
        elif kind == 1:
            out.chain[a] = text
        elif kind == 2:
            out.notes[a] = text
        else:
            out.lines.setdefault(a, []).append(text)
    return out


def tiles_read(widths: TileWidths, *, cover: int, checkpoint_size: int | None = None
               ) -> tuple[dict[tuple[int, int], TileHashes], _Read]:  # fmt: skip
    """The first `widths[key]` hashes of each tile (absent: the database holds fewer), from the
    cache or the database; `cover` is the seq of the last leaf they lie over (its chain row is
    read too). Tiles read now are cached when the chain has that row."""
    db = _database()
    for attempt in (1, 2):
        seen = CACHE.anchor(db)
        found: dict[tuple[int, int], TileHashes] = {}
        if attempt == 1:
            for key, width in widths.items():
                tile = CACHE.get(db, seen, key[0], key[1], width)
                if tile is not None:
                    found[key] = tile
        missing = [key for key in widths if key not in found]
        seqs = sorted({cover, seen.seq} - {0})
        read = _read(missing, seqs, checkpoint_size)
        if seen.seq and read.chain.get(seen.seq) != seen.hash:
            CACHE.invalidate(db, seen)  # another tree than the cached one: read it all again
            continue
        fresh = {}
        for key in missing:
            stored, want = read.tiles.get(key, b""), widths[key] * merkle.HASH_SIZE
            if want and len(stored) >= want:
                fresh[key] = TileHashes(stored[:want])
        if fresh and cover in read.chain:
            CACHE.store(db, seen, fresh, seq=cover, chain_hash=read.chain[cover])
        return {**found, **fresh}, read
    raise AssertionError("unreachable: the second read has no anchor to disagree with")


def tile(*, level: int, index: int, width: int) -> bytes:
    """The first `width` hashes of tile level/index; 404 until it holds them."""
    cover = ((index * merkle.TILE_WIDTH) + width) << (merkle.TILE_HEIGHT * level)
    found = tiles_read({(level, index): width}, cover=cover)[0] if cover <= BIGINT_MAX else {}
    if (level, index) not in found:
        raise NotFound(f"tile {level}/{index} does not hold {width} hashes yet")
    return found[(level, index)].hashes


def _widths(size: int, plan) -> TileWidths:
    """The tiles, with how many hashes of each, that `plan` (a proof over a tree of `size`) reads."""
    widths: TileWidths = {}

    def placeholder(level: int, index: int) -> bytes:
        tile_level, rise = divmod(level, merkle.TILE_HEIGHT)
        key = (tile_level, (index << rise) // merkle.TILE_WIDTH)
        widths[key] = _width(size, *key)
        return bytes(merkle.HASH_SIZE)

    plan(placeholder)
    return widths


def _width(size: int, level: int, index: int) -> int:
    """How many hashes tile level/index holds in a tree of `size` leaves."""
    full, partial = merkle.tile_counts(size, level)
    return merkle.TILE_WIDTH if index < full else partial


def _source(tiles: dict[tuple[int, int], TileHashes]) -> merkle.HashSource:
    """A HashSource over cached tiles: every subtree hash a lookup."""

    def source(level: int, index: int) -> bytes:
        tile_level, rise = divmod(level, merkle.TILE_HEIGHT)
        first = index << rise
        key = (tile_level, first // merkle.TILE_WIDTH)
        found = tiles.get(key)
        digest = found.subtree(rise, (first % merkle.TILE_WIDTH) >> rise) if found else None
        if digest is None:
            raise merkle.ProofError(
                f"tile {key[0]}/{key[1]} does not cover subtree {level}/{index}"
            )
        return digest

    return source


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def _size_refused(size: int) -> InvalidInput:
    current = selectors.tree_size()
    return InvalidInput(f"size {size} is not between 1 and the tree size {current}")


def event_inclusion(*, seq: int, size: int | None = None) -> dict[str, Any]:
    """`selectors.event_inclusion` from cached tiles: entry `seq`'s inclusion proof at `size` (the
    whole tree by default), base64, with the checkpoint signed at that size and its cosignatures.
    InvalidInput (400) names the reason when seq or size lies outside the tree."""
    size = selectors.tree_size() if size is None else size
    if not 1 <= size <= BIGINT_MAX:
        raise _size_refused(size)
    if not 1 <= seq <= size:
        if size > selectors.tree_size():
            raise _size_refused(size)
        raise InvalidInput(f"seq {seq} is not in a tree of size {size} (seq runs from 1)")
    widths = _widths(
        size, lambda s: (merkle.inclusion_proof(s, seq - 1, size), merkle.root(s, size))
    )
    leaf_tile = (0, (seq - 1) // merkle.TILE_WIDTH)  # the path may not pass through it
    widths.setdefault(leaf_tile, _width(size, *leaf_tile))
    tiles, read = tiles_read(widths, cover=size, checkpoint_size=size)
    if size not in read.chain:
        raise _size_refused(size)
    source = _source(tiles)
    proof, root = merkle.inclusion_proof(source, seq - 1, size), merkle.root(source, size)
    return {
        "seq": seq,
        "index": seq - 1,
        "size": size,
        "root": _b64(root),
        "leaf_hash": _b64(source(0, seq - 1)),
        "proof": [_b64(p) for p in proof],
        "checkpoint": read.note(),
    }


def consistency_proof(*, old: int, new: int | None = None) -> tuple[int, list[bytes], bytes, bytes]:
    """`selectors.consistency_proof` from cached tiles: (new, PROOF(old, D[new]), old root, new root)."""
    new = selectors.tree_size() if new is None else new

    def to_refused() -> InvalidInput:
        return InvalidInput(f"to={new} is not between 1 and the tree size {selectors.tree_size()}")

    if not 1 <= new <= BIGINT_MAX:
        raise to_refused()
    if not 1 <= old <= new:
        if new > selectors.tree_size():
            raise to_refused()
        raise InvalidInput(f"from={old} is not between 1 and to={new}")

    def plan(s: merkle.HashSource) -> tuple:
        return merkle.consistency_proof(s, old, new), merkle.root(s, old), merkle.root(s, new)

    tiles, read = tiles_read(_widths(new, plan), cover=new)
    if new not in read.chain:
        raise to_refused()
    proof, old_root, new_root = plan(_source(tiles))
    return new, proof, old_root, new_root


__all__ = ["CACHE", "Anchor", "consistency_proof", "event_inclusion", "tile", "tiles_read"]
