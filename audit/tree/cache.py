"""The web process's bounded cache of Merkle tiles for the transparency log's hot reads (no Django).

A tile's first W hashes never change once the tree holds them (tiles only grow, audit/triggers.py),
so the tile and proof routes keep them in memory instead of reading them per request. What can
change is the tree itself: a test database is rolled back or emptied between tests and a new
tree grows at the same (level, index); two databases have trees of their own. So:

- an entry is keyed by (database identity, epoch, level, index, width): the width is part of the
  key, so the first W hashes of a partial tile never answer a request for more of them, nor for
  the full tile;
- each database has an *anchor*: a seq at or above the last leaf of every entry cached for it,
  with the chain's hash at that seq. The hash chain commits to every entry up to that seq, so
  while the chain's row there still carries that hash, the tree below it is the one the entries
  were read from. The reader checks it in the same statement that reads what it misses
  (audit/tree/serving.py); when it differs, `invalidate` drops the database's entries (a new
  epoch) and the reader reads them all again from the database.

`TileHashes` also holds, computed on first use, the hash of every complete subtree inside the
tile, so a proof over cached tiles is a few lookups rather than hundreds of SHA-256 calls.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

HASH_SIZE = 32
TILE_WIDTH = 256
# Entries held across all databases: a full tile is 8 KiB of hashes and, once a proof used it,
# 8 KiB of subtree hashes, so at most about 16 MiB. The tiles of a proof's upper levels and its
# tree's right edge are few and stay; level-0 tiles come and go.
CAPACITY = 1024


class TileHashes:
    """The first `width` hashes of one tile and the complete subtrees over them."""

    __slots__ = ("hashes", "_levels")

    def __init__(self, hashes: bytes) -> None:
        if not hashes or len(hashes) % HASH_SIZE or len(hashes) > TILE_WIDTH * HASH_SIZE:
            raise ValueError(f"a tile holds 1..{TILE_WIDTH} hashes of {HASH_SIZE} bytes")
        self.hashes = hashes
        self._levels: list[bytes] | None = None

    @property
    def width(self) -> int:
        return len(self.hashes) // HASH_SIZE

    def subtree(self, rise: int, position: int) -> bytes | None:
        """The RFC 9162 hash of hashes position * 2**rise .. (position + 1) * 2**rise - 1 of the
        tile (a complete subtree `rise` levels above them); None when the tile does not hold them."""
        levels = self._levels if self._levels is not None else self._build()
        if not 0 <= rise < len(levels) or position < 0:
            return None
        at = position * HASH_SIZE
        found = levels[rise][at : at + HASH_SIZE]
        return found if len(found) == HASH_SIZE else None

    def _build(self) -> list[bytes]:
        # node(left, right) = SHA-256(0x01 || left || right): left and right lie side by side.
        levels, row = [self.hashes], self.hashes
        while len(row) >= 2 * HASH_SIZE:
            pairs = len(row) // (2 * HASH_SIZE) * 2 * HASH_SIZE
            row = b"".join(
                hashlib.sha256(b"\x01" + row[i : i + 2 * HASH_SIZE]).digest()
                for i in range(0, pairs, 2 * HASH_SIZE)
            )
            levels.append(row)
        self._levels = levels
        return levels


@dataclass(frozen=True)
class Anchor:
    """A database's cache generation: `epoch`, and the chain's `hash` at `seq` (0: none yet)."""

    epoch: int
    seq: int = 0
    hash: str = ""


class TileCache:
    """A bounded LRU of `TileHashes` per database, each database's entries under its anchor."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("the tile cache needs room for at least one tile")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple, TileHashes] = OrderedDict()
        self._anchors: dict[Hashable, Anchor] = {}
        self._epochs = 0

    def anchor(self, db: Hashable) -> Anchor:
        """The database's current anchor (a fresh epoch without one when it has none)."""
        with self._lock:
            return self._anchor(db)

    def _anchor(self, db: Hashable) -> Anchor:
        found = self._anchors.get(db)
        if found is None:
            self._epochs += 1
            found = self._anchors[db] = Anchor(self._epochs)
        return found

    def get(
        self, db: Hashable, anchor: Anchor, level: int, index: int, width: int
    ) -> TileHashes | None:
        """The first `width` hashes of tile level/index if cached under `anchor`'s epoch."""
        key = (db, anchor.epoch, level, index, width)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def store(self, db: Hashable, seen: Anchor, tiles: dict[tuple[int, int], TileHashes], *,
              seq: int, chain_hash: str) -> bool:  # fmt: skip
        """Keep `tiles`, read with the chain's hash at `seq` in the statement that found `seen`
        still true; False (nothing kept) when the anchor moved meanwhile and `tiles` may lie
        above what that statement checked."""
        with self._lock:
            current = self._anchor(db)
            if current.epoch != seen.epoch:
                return False  # invalidated since: these were read from another tree
            if current != seen and seq > seen.seq:
                return False  # another reader moved the anchor; only `seen.seq` was checked here
            for (level, index), tile in tiles.items():
                key = (db, current.epoch, level, index, tile.width)
                self._entries[key] = tile
                self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
            if seq > current.seq:
                self._anchors[db] = Anchor(current.epoch, seq, chain_hash)
            return True

    def invalidate(self, db: Hashable, seen: Anchor) -> None:
        """The chain's hash at `seen.seq` is no longer `seen.hash`: drop the database's entries."""
        with self._lock:
            if self._anchors.get(db) != seen:
                return  # another reader did it already
            for key in [k for k in self._entries if k[0] == db]:
                del self._entries[key]
            self._epochs += 1
            self._anchors[db] = Anchor(self._epochs)

    def clear(self) -> None:
        """Forget every database's entries and anchors."""
        with self._lock:
            self._entries.clear()
            self._anchors.clear()

    def __len__(self) -> int:
        return len(self._entries)
