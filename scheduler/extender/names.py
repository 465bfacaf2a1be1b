"""Node names looked up straight from the bytes of a JSON array, without a Python object per name.

kube-scheduler sampling nodes (`percentageOfNodesToScore`) or a cluster that
changes between pods sends a new `NodeNames` list on every call, so each call
must map every name to its inventory row. A dict lookup per decoded name was
most of such a call at 12,477 names; here the names are hashed and looked up as
arrays. Kept for one measured target, the extender's HTTP p99 <= 10 ms with
varied lists at 12,477 names: with it and split decoding (`protocol.parse_args`)
the CPU per filter + prioritize pair fell from 26.2 to 11.4 ms p50 on the loaded
machine (`bench/results/extender_bench-varied-2026-12-01-loaded{-before,}.json`;
docs/scheduler.md, "The cache, and when it helps").

`NameTable(names)` is built once per snapshot. Each name is read as
little-endian 64-bit words of its UTF-8 bytes (zero beyond its length), hashed,
and kept in an open-addressing table (linear probing, a quarter full).
`lookup(array, count)` finds the names of a JSON array of `count` strings the
same way and compares every candidate's length and words with the row the table
gives: a row is returned only for a name equal byte for byte, so the result is
exact, never a guess. An array holding a backslash (an escaped name: its bytes
are not the name's) is not looked up (`None`); the caller decodes it instead.
"""

from __future__ import annotations

import numpy as np
import orjson

# 64-bit multiplicative mixing (Fibonacci hashing constant, then an xor-shift).
_MIX = np.uint64(0x9E3779B97F4A7C15)
_SHIFT = np.uint64(29)
# _KEEP[v]: a mask keeping the first v bytes of a little-endian 64-bit word.
_KEEP = np.array([(1 << (8 * v)) - 1 for v in range(8)] + [2**64 - 1], dtype=np.uint64)
_WORD = np.dtype("<u8")
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
    view = np.ndarray((len(padded) - 7,), dtype=_WORD, buffer=padded, strides=(1,))
    columns = []
    for c in range(width):
        word = view[starts + 8 * c]
        word &= _KEEP[np.clip(lengths - 8 * c, 0, 8)]
        columns.append(word)
    return columns


def _hash(columns: list[np.ndarray], lengths: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each string from its length and word columns."""
    key = lengths.astype(np.uint64) * _MIX
    for word in columns:
        key ^= word
        key *= _MIX
        key ^= key >> _SHIFT
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
        self.columns = _words(array + bytes(8 * self.width), starts, self.lengths, self.width)
        bits = max(4, int(np.ceil(np.log2(4 * max(1, len(positions))))))
        self._mask = (1 << bits) - 1
        self._shift = np.uint64(64 - bits)
        self._slots = np.full(1 << bits, -1, dtype=np.int64)  # entry number, -1 empty
        self._positions = positions
        home = (_hash(self.columns, self.lengths) >> self._shift).astype(np.int64)
        pending, step = np.arange(len(positions)), 0
        while pending.size:  # linear probing, one step for all pending entries at a time
            slots = (home[pending] + step) & self._mask
            free = np.flatnonzero(self._slots[slots] == -1)
            taken, first = np.unique(slots[free], return_index=True)
            self._slots[taken] = pending[free[first]]
            placed = np.zeros(pending.size, dtype=bool)
            placed[free[first]] = True
            pending, step = pending[~placed], step + 1
        # Every entry sits at most this many steps past its home slot.
        self._probes = step

    def lookup(self, array: bytes, count: int) -> np.ndarray | None:
        """The position in `names` of each string of a JSON array of `count` strings (-1: unknown).

        `array` must be a valid JSON array of `count` strings (the caller decoded it).
        None when it holds a backslash: its bytes are then not the names.
        """
        if b"\\" in array:
            return None
        starts, lengths = _spans(array)
        if starts.shape[0] != count:
            return None
        found = np.full(count, -1, dtype=np.int64)
        if not count or not len(self._positions):
            return found
        columns = _words(array + bytes(8 * self.width), starts, lengths, self.width)
        slots = (_hash(columns, lengths) >> self._shift).astype(np.int64)
        todo = np.arange(count)
        for _ in range(self._probes):
            entry = self._slots.take(slots)
            occupied = entry >= 0
            same = occupied & (self.lengths.take(entry) == lengths)
            for table_word, word in zip(self.columns, columns, strict=True):
                same &= table_word.take(entry) == word
            found[todo[same]] = self._positions.take(entry[same])
            # Probe on past occupied slots holding another name; an empty slot ends the search.
            more = occupied & ~same
            if not more.any():
                break
            todo, lengths, slots = todo[more], lengths[more], (slots[more] + 1) & self._mask
            columns = [word[more] for word in columns]
        return found
