"""A NodeNames array's names found in a `NameTable` from its JSON bytes, compiled (numba).

`positions(table, array)` reads the array byte by byte (numba), checks that it
is a JSON array of strings with no backslash and no control character in them,
and finds each string in the table by its hash and an exact comparison of its
length and words: the row of every name, -1 for a name the table does not
hold, or None when the bytes are not such an array (the caller decodes them
instead). A string found in the table is byte for byte one of its names, valid
UTF-8 and valid JSON, so when every string is found the array decodes to
exactly those names and need not be decoded at all (`protocol._parse_split`).

Kept for the extender's HTTP p99 targets with a new list on every call (<= 10 ms
at 12,477 names, <= 2 ms at kube-scheduler's adaptive 623). Measured on other
sizes and seeds than the benchmark's (12,000 nodes, snapshot seed 7, lists of
seed 11), on the shared machine at load 1-4, interleaved: looking up a
12,000-name array took 0.75-0.79 ms with the vectorised numpy probe this
replaces and 0.35-0.39 ms here (best of 7); with the array no longer decoded
(orjson: 0.29 ms; `NodeSnapshot.names_at` instead) the CPU per filter +
prioritize pair fell from 4.22 to 2.56 ms p50 at 12,000 names and from 0.31 to
0.24 ms at 600 (medians of 4 runs each). The scan and the probe are two passes:
one pass interleaving them was slower than numpy (each probe's table reads then
wait behind the byte loop instead of overlapping). Alternated with and without it
(`KILN_EXTENDER_COMPILED_LOOKUP=0`: every array decoded and looked up name by name) on
the benchmark's own lists, on the shared machine at load 13-20
(`bench/results/extender_bench-lookup-{varied,adaptive}-2026-12-06.json`): the CPU per
filter + prioritize pair at 12,477 names 2.94 against 12.04 ms p50 and 5.19 against
18.49 ms p99 (without it the CPU alone passes the 10 ms target), at 623 names 0.31
against 0.68 ms p50.

This module stands apart from `names` so that reading the inventory
(`snapshot`) does not load numba; `protocol` calls it.
"""

from __future__ import annotations

import os

import numpy as np
from numba import njit

from scheduler.extender.names import KEEP, MIX, SHIFT, WORD, NameTable

_QUOTE, _BACKSLASH, _COMMA, _OPEN, _CLOSE = 0x22, 0x5C, 0x2C, 0x5B, 0x5D
_NOT_AN_ARRAY = -1
# KILN_EXTENDER_COMPILED_LOOKUP=0: `positions` finds nothing, so every array is decoded and
# looked up name by name (to compare: `extender_bench --node-lists varied`).
COMPILED = os.environ.get("KILN_EXTENDER_COMPILED_LOOKUP", "1") != "0"


# _STOP[b]: whether byte b ends a run of a string's plain bytes (quote, backslash, control).
_STOP = np.zeros(256, dtype=np.uint8)
_STOP[:0x20] = 1
_STOP[_QUOTE] = _STOP[_BACKSLASH] = 1


@njit(cache=True, nogil=True, inline="always")
def _skip_ws(array, i, n):  # pragma: no cover - compiled
    """The first position from i (below n) that is not JSON whitespace (space, tab, LF, CR)."""
    while i < n and (array[i] == 0x20 or array[i] == 0x0A or array[i] == 0x0D or array[i] == 0x09):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _scan(padded, n, view, keep, stop, words, lengths):  # pragma: no cover - compiled
    """Each string's length and words into `lengths`/`words`; how many strings, or _NOT_AN_ARRAY.

    `padded` is the array's n bytes and zeros after them. Accepts exactly ws '['
    ws ( ']' | string ws (',' ws string ws)* ']' ) ws, where a string holds no
    quote, backslash or byte below 0x20 between its quotes. `stop[b]` marks those
    bytes; the zeros after the array stop a string the array does not close, so
    the loop over a string's bytes tests one table entry per byte. `view` reads
    the little-endian word at any byte offset; words beyond the table's width
    are not read (such a string is longer than every name).
    """
    width = words.shape[1]
    i = _skip_ws(padded, 0, n)
    if i >= n or padded[i] != _OPEN:
        return _NOT_AN_ARRAY
    i = _skip_ws(padded, i + 1, n)
    count = 0
    if i < n and padded[i] == _CLOSE:
        return count if _skip_ws(padded, i + 1, n) == n else _NOT_AN_ARRAY
    while True:
        if i >= n or padded[i] != _QUOTE or count >= lengths.shape[0]:
            return _NOT_AN_ARRAY
        start = i + 1
        j = start
        while stop[padded[j]] == 0:
            j += 1
        if j >= n or padded[j] != _QUOTE:
            return _NOT_AN_ARRAY
        length = j - start
        lengths[count] = length
        if length <= 8 * width:
            for c in range(width):
                words[count, c] = view[start + 8 * c] & keep[min(8, max(0, length - 8 * c))]
        count += 1
        i = _skip_ws(padded, j + 1, n)
        if i < n and padded[i] == _COMMA:
            i = _skip_ws(padded, i + 1, n)
        elif i < n and padded[i] == _CLOSE:
            return count if _skip_ws(padded, i + 1, n) == n else _NOT_AN_ARRAY
        else:
            return _NOT_AN_ARRAY


@njit(cache=True, nogil=True)
def _probe(words, lengths, records, slots, mask, shift, out):  # pragma: no cover - compiled
    """Per scanned string, its table entry's position in the names (-1: not in the table).

    The hash is `names._hash` over the table's width of words, so a name sits
    where the table put it; a record holds an entry's words, then its length and
    position. A separate pass from `_scan`, so the table's memory is read for
    many strings at once rather than between byte loops.
    """
    width = words.shape[1]
    for k in range(out.shape[0]):
        length = lengths[k]
        out[k] = -1
        if length > 8 * width:
            continue  # longer than every name in the table
        key = np.uint64(length) * MIX
        for c in range(width):
            key ^= words[k, c]
            key *= MIX
            key ^= key >> SHIFT
        slot = np.int64(key >> shift)
        while True:  # the table is at most a quarter full: an empty slot ends every probe
            entry = slots[slot]
            if entry < 0:
                break
            if records[entry, width] == length:
                same = True
                for c in range(width):
                    if records[entry, c] != words[k, c]:
                        same = False
                        break
                if same:
                    out[k] = np.int64(records[entry, width + 1])
                    break
            slot = (slot + 1) & mask


def positions(table: NameTable, array: bytes) -> np.ndarray | None:
    """The row in the table's names of each string of a JSON array (-1: unknown), or None.

    None when `array` is not a JSON array of strings free of backslashes and
    control characters (an escaped name's bytes are not the name): the caller
    decodes it instead, which also words any error.
    """
    if not COMPILED:
        return None
    width = table.width
    # Every string takes at least 3 bytes ('"",'), the brackets 2 (less one comma).
    capacity = max(1, (len(array) - 1) // 3)
    words = np.empty((capacity, width), dtype=np.uint64)
    lengths = np.empty(capacity, dtype=np.int64)
    # Zeros past the end: they stop an unclosed string, and the last string's words
    # read no byte outside the buffer.
    padded = array + bytes(8 * width + 8)
    view = np.ndarray((len(padded) - 7,), dtype=WORD, buffer=padded, strides=(1,))
    count = _scan(
        np.frombuffer(padded, dtype=np.uint8), len(array), view, KEEP, _STOP, words, lengths
    )
    if count == _NOT_AN_ARRAY:
        return None
    found = np.empty(count, dtype=np.int64)
    _probe(words, lengths, table.records, table.slots, table.mask, table.shift, found)
    return found


def warm_up() -> None:
    """Compile (or load from numba's cache) the scan before the first call waits on it."""
    positions(NameTable(["a"]), b'["a", "b"]')
