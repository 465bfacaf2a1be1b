"""The inventory's node names as a hash table keyed by their JSON bytes (`NameTable`).

kube-scheduler sampling nodes (`percentageOfNodesToScore`) or a cluster that
changes between pods sends a new `NodeNames` list on every call, so each call
must map every name to its inventory row. A dict lookup per decoded name was
most of such a call at 12,477 names; instead the names are found from the bytes
of the array (`lookup.positions`, compiled) in this table. Kept for one measured
target, the extender's HTTP p99 <= 10 ms with varied lists at 12,477 names: with
it and split decoding (`protocol.parse_args`) the CPU per filter + prioritize
pair fell from 26.2 to 11.4 ms p50 on the loaded machine
(`bench/results/extender_bench-varied-2026-12-01-loaded{-before,}.json`;
docs/scheduler.md, "The cache, and when it helps").

`NameTable(names)` is built once per snapshot, with numpy (no numba: reading
the inventory stays light). Each name is read as little-endian 64-bit words of
its UTF-8 bytes (zero beyond its length), hashed (`_hash`), and kept in an
open-addressing table (linear probing, a quarter full). `lookup.positions`
hashes each string of an array the same way and compares its length and words
with the entry the table gives: a row is returned only for a name equal byte for
byte, so the result is exact, never a guess. A name that needs escaping is left
out (its JSON bytes hold a backslash, and an array holding one is decoded).
"""

from __future__ import annotations

import numpy as np
import orjson

# 64-bit multiplicative mixing (Fibonacci hashing constant, then an xor-shift).
MIX = np.uint64(0x9E3779B97F4A7C15)
SHIFT = np.uint64(29)
# KEEP[v]: a mask keeping the first v bytes of a little-endian 64-bit word.
KEEP = np.array([(1 << (8 * v)) - 1 for v in range(8)] + [2**64 - 1], dtype=np.uint64)
WORD = np.dtype("<u8")
_QUOTE = 0x22


def _spans(array: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each string of a backslash-free JSON array starts (after its quote), and its length."""
    quotes = np.flatnonzero(np.frombuffer(array, dtype=np.uint8) == _QUOTE)
    starts = quotes[0::2] + 1
    return starts, quotes[1::2] - starts


def _words(padded: bytes, starts: np.ndarray, lengths: np.ndarray, width: int) -> list[np.ndarray]:
    """Per word column, each string's 8 bytes at that column, zero beyond its length.

    `padded` must carry 8 * width bytes beyond the last string, so no read leaves it.
    """
    # Every byte offset as the start of a little-endian word (an unaligned strided view).
    view = np.ndarray((len(padded) - 7,), dtype=WORD, buffer=padded, strides=(1,))
    columns = []
    for c in range(width):
        word = view[starts + 8 * c]
        word &= KEEP[np.clip(lengths - 8 * c, 0, 8)]
        columns.append(word)
    return columns


def _hash(columns: list[np.ndarray], lengths: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each string from its length and word columns."""
    key = lengths.astype(np.uint64) * MIX
    for word in columns:
        key ^= word
        key *= MIX
        key ^= key >> SHIFT
    return key


class NameTable:
    """An exact hash table from node name (as JSON bytes) to its position in `names`."""

    def __init__(self, names: list[str]) -> None:
        array = orjson.dumps(names)
        positions = np.arange(len(names))
        if b"\\" in array:
            # A name that needs escaping can never stand unescaped in a backslash-free
            # array: leave it out and index the others.
            plain = [i for i, name in enumerate(names) if b"\\" not in orjson.dumps(name)]
            positions = np.array(plain, dtype=np.int64)
            array = orjson.dumps([names[i] for i in plain])
        starts, self.lengths = _spans(array)
        self.width = max(1, -(-int(self.lengths.max(initial=0)) // 8))
        columns = _words(array + bytes(8 * self.width), starts, self.lengths, self.width)
        # Per entry, one record: its name's `width` words, its length, its position in
        # `names` (what `lookup` compares and returns), so a probe reads one record, not
        # three arrays: a 12,477-name array looked up in 0.42 ms against 0.53 (p50 of
        # 300, interleaved, load ~6), for the varied-list HTTP p99 <= 10 ms target.
        width = self.width
        self.records = np.zeros((len(positions), width + 2), dtype=np.uint64)
        for c, column in enumerate(columns):
            self.records[:, c] = column
        self.records[:, width] = self.lengths
        self.records[:, width + 1] = positions
        bits = max(4, int(np.ceil(np.log2(4 * max(1, len(positions))))))
        self.mask = (1 << bits) - 1
        self.shift = np.uint64(64 - bits)
        # Entry numbers (-1 empty), int32: half the memory a probe's first read touches.
        self.slots = np.full(1 << bits, -1, dtype=np.int32)
        home = (_hash(columns, self.lengths) >> self.shift).astype(np.int64)
        pending, step = np.arange(len(positions)), 0
        while pending.size:  # linear probing, one step for all pending entries at a time
            slots = (home[pending] + step) & self.mask
            free = np.flatnonzero(self.slots[slots] == -1)
            taken, first = np.unique(slots[free], return_index=True)
            self.slots[taken] = pending[free[first]].astype(np.int32)
            placed = np.zeros(pending.size, dtype=bool)
            placed[free[first]] = True
            pending, step = pending[~placed], step + 1
        # Every entry sits at most this many steps past its home slot.
        self.probes = step
