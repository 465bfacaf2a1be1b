"""Kiln's inventory as arrays (`NodeSnapshot`) and the cache of candidate lists resolved against it.

kube-scheduler in `nodeCacheCapable: true` mode sends only node names; the
extender answers from a snapshot of its inventory: names, an index by name and
the (N, 9) scoring matrix in `scoring.NodeArrays.COLUMNS` order. A snapshot is
never changed once built (a changed inventory is a new snapshot), so what it
caches lives and dies with it:

  * `Resolution`: a candidate list resolved to rows. kube-scheduler scoring every
    node of a stable cluster sends the same list pod after pod, so the last
    RESOLUTION_CACHE_SIZE lists are kept and found again by exact comparison;
  * the fixed-width JSON items of every node (`encoding.padded_items`);
  * the `names.NameTable` that `lookup` finds a list's names in from its JSON bytes,
    and the names as an object array (a list of them without a dict lookup).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from scheduler import pools, scoring
from scheduler.extender.encoding import host_entries, names_are_plain, padded_items
from scheduler.extender.names import NameTable

# How many distinct candidate lists one snapshot keeps resolved.
RESOLUTION_CACHE_SIZE = 8
# How many lists a filter passed one snapshot keeps expecting (see `NodeSnapshot.expect`).
EXPECTED_LISTS = 4
# How many encoded failure maps one resolution keeps (one per workload-class outcome).
MAPS_PER_RESOLUTION = 4


def fail_safe_prices(rows: np.ndarray, snapshot: NodeSnapshot) -> np.ndarray:
    """Charge unpriced candidates the highest known price (price book or candidates, whichever is higher)."""
    prices = rows[:, 6]
    missing = np.isnan(prices)
    if missing.any() and not np.isnan(snapshot.max_price):
        known = prices[~missing]
        highest = max(snapshot.max_price, float(known.max())) if known.size else snapshot.max_price
        rows[:, 6] = np.where(missing, highest, prices)
    return rows


@dataclass(eq=False)
class Resolution:
    """A candidate NodeNames list resolved against one snapshot, reused while the list repeats.

    Everything here depends only on the names and the snapshot, never on the pod:
    the row of each name (-1 unknown), the gathered scoring rows (read-only;
    unknown names are not usable), the same rows with fail-safe prices, whether
    any name needs JSON escaping, the bytes the list came in, and encoded
    FailedAndUnresolvableNodes maps keyed by the exact reason vector they encode.
    A list whose names are all known carries only their rows until its names are
    asked for (`names`, read from the snapshot's names then): for the varied-list
    HTTP p99 <= 10 ms target at 12,477 names, building the list (an object gather
    and a copy) was a fifth of a pair's CPU; without it, CPU per filter + prioritize
    pair with varied 12,477-name lists went 6.16 / 8.04 -> 4.44 / 3.02 ms p50 (two
    interleaved rounds at load ~4.6, together with `priced_rows` not copying).
    """

    idx: np.ndarray
    usable: np.ndarray
    rows: np.ndarray
    all_known: bool
    plain: bool
    # The names as a list, when given; otherwise built from `idx` on first use.
    _names: list[str] | None = field(default=None, repr=False)
    # The snapshot's names as an object array (what `names` reads from `idx`).
    _objects: np.ndarray | None = field(default=None, repr=False)
    # How often an equal list was resolved again (see `NodeSnapshot.resolve`).
    hits: int = 0
    # The exact bytes of the NodeNames array this list came in (b"" until verified).
    raw: bytes = b""
    _priced: np.ndarray | None = field(default=None, repr=False)
    _maps: dict[bytes, tuple[bytes, int]] = field(default_factory=dict, repr=False)

    @property
    def names(self) -> list[str]:
        """The candidate names in order (every one known, unless they were given)."""
        if self._names is None:
            assert self._objects is not None and self.all_known
            self._names = self._objects.take(self.idx).tolist()
        return self._names

    @property
    def count(self) -> int:
        """How many candidates the list holds."""
        return self.idx.shape[0]

    def priced_rows(self, snapshot: NodeSnapshot) -> np.ndarray:
        """`rows` with unpriced candidates charged the highest known price (read-only).

        `rows` themselves when no price is missing or the book has none to charge (the
        kernel then charges the candidates' highest, as `scoring.effective_prices`):
        no copy of every candidate's row per prioritize call.
        """
        if self._priced is None:
            if np.isnan(snapshot.max_price) or not np.isnan(self.rows[:, 6]).any():
                self._priced = self.rows
            else:
                priced = fail_safe_prices(self.rows.copy(), snapshot)
                priced.flags.writeable = False
                self._priced = priced
        return self._priced

    def encoded_map(self, key: bytes) -> tuple[bytes, int] | None:
        """A failure map encoded earlier for the reason vector `key`, with its entry count."""
        return self._maps.get(key)

    def keep_map(self, key: bytes, encoded: tuple[bytes, int]) -> None:
        """Keep an encoded failure map for the reason vector `key` (a few at most)."""
        if len(self._maps) >= MAPS_PER_RESOLUTION:
            self._maps.clear()
        self._maps[key] = encoded


@dataclass
class NodeSnapshot:
    """Kiln's inventory as arrays: names, an index by name, and the (N, 9) scoring matrix."""

    names: list[str]
    matrix: np.ndarray
    index: dict[str, int] = field(default_factory=dict)
    # The highest price in the price book: what an unpriced node is charged (NaN if none).
    max_price: float = float("nan")
    # Each node's capacity pool and own-pool environment (`pools.PoolLayout`); None: no pool rules.
    layout: pools.PoolLayout | None = None
    # Workloads' spot replicas per capacity pool (`pools.Placements`); None: no spread filter.
    # The one mutable part: the simulated kube-scheduler shares its live cache here.
    placements: pools.Placements | None = None
    # k of the spread filter per workload class (`pools.parse_spread_k`).
    spread_k: dict[str, int] = field(default_factory=lambda: pools.parse_spread_k(None))

    # Per node, the JSON text '{"Host":"<name>","Score":' (built on first use).
    _host_entries: np.ndarray | None = field(default=None, repr=False, compare=False)
    # The names as an array-keyed hash table (built on first use).
    _name_table: NameTable | None = field(default=None, repr=False, compare=False)
    # The names as a numpy object array (built on first use).
    _name_objects: np.ndarray | None = field(default=None, repr=False, compare=False)
    # Space-padded JSON items per node, by kind (see `padded_items`).
    _padded: dict[str, np.ndarray | None] = field(default_factory=dict, repr=False, compare=False)
    # Recently resolved candidate lists, most recent first (see `resolve`).
    _resolutions: list[Resolution] = field(default_factory=list, repr=False, compare=False)
    # Lists a filter passed, as (the JSON bytes they will come in, their rows): see `expect`.
    _expected: list[tuple[bytes, np.ndarray]] = field(
        default_factory=list, repr=False, compare=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {name: i for i, name in enumerate(self.names)}

    def padded_items(self, kind: str) -> np.ndarray | None:
        """Per node, its JSON item of one width (`encoding.padded_items`), built once per kind."""
        if kind not in self._padded:
            self._padded[kind] = padded_items(self.names, kind)
        return self._padded[kind]

    def host_entries(self) -> np.ndarray:
        """Per node, the opening of its HostPriority object (`encoding.host_entries`), built once."""
        if self._host_entries is None:
            self._host_entries = host_entries(self.names)
        return self._host_entries

    def name_table(self) -> NameTable:
        """The names as a `NameTable` (looked up from JSON bytes), built once."""
        if self._name_table is None:
            self._name_table = NameTable(self.names)
        return self._name_table

    def name_objects(self) -> np.ndarray:
        """The names as a numpy object array (gathered by row, several times faster than a
        list built from `idx.tolist()` at 12k names), built once."""
        if self._name_objects is None:
            objects = np.empty(len(self.names), dtype=object)
            objects[:] = self.names
            self._name_objects = objects
        return self._name_objects

    def names_at(self, idx: np.ndarray) -> list[str]:
        """The names at rows `idx` (all known), as a list."""
        return self.name_objects().take(idx).tolist()

    def resolve(
        self, names: list[str] | None, raw: bytes | None = None, idx: np.ndarray | None = None
    ) -> Resolution:
        """The `Resolution` of a candidate list, from the cache when an equal list was seen.

        `names` are the candidates, or None when `idx` (their rows, found from `raw`,
        the JSON array they came in: `lookup.positions`) holds every one; without
        `idx`, each name is looked up in the index. Equality is exact (same names,
        same order), so a hit is never a guess: lists of known names are compared by
        their rows (a name's row names it), others by their names.
        """
        if idx is None:
            assert names is not None
            idx = np.fromiter(
                map(self.index.get, names, repeat(-1)), dtype=np.int64, count=len(names)
            )
        usable = idx >= 0
        all_known = bool(usable.all())
        with self._lock:
            for pos, cached in enumerate(self._resolutions):
                if _same_list(cached, idx, all_known, names):
                    cached.hits += 1
                    if pos:
                        self._resolutions.insert(0, self._resolutions.pop(pos))
                    return cached
        if len(self.names):
            # take: several times faster than fancy indexing here; an unknown (-1) takes row 0.
            rows = self.matrix.take(idx, axis=0, mode="clip")
        else:
            rows = np.zeros((idx.shape[0], len(scoring.NodeArrays.COLUMNS)))
        for array in (idx, usable, rows):
            array.flags.writeable = False
        resolution = Resolution(
            idx=idx,
            usable=usable,
            rows=rows,
            all_known=all_known,
            # A backslash-free JSON array of strings holds no name that needs escaping.
            plain=b"\\" not in raw
            if raw is not None
            else names_are_plain(names if names is not None else self.names_at(idx)),
            _names=list(names) if names is not None else None,
            _objects=self.name_objects(),
        )
        with self._lock:
            self._resolutions.insert(0, resolution)
            del self._resolutions[RESOLUTION_CACHE_SIZE:]
        return resolution

    def expect(self, idx: np.ndarray, raw: bytes) -> None:
        """Expect a list this snapshot is about to be sent: the names a filter passed, which
        kube-scheduler sends back to prioritize.

        `idx` are the names' rows (all known), `raw` the JSON array kube-scheduler writes
        for them (Go's encoding of a list of plain names: no spaces). The prioritize call
        then finds its list by those bytes (`recall`) instead of decoding and looking up
        every name again; a list sent otherwise is decoded as before. Expected lists are
        kept apart from the resolutions, and resolved only when they come: lists that
        never come back (a client writing spaces, as the benchmark's bodies do) cannot
        push out lists that do. In one cache with them, the same-list CPU per filter +
        prioritize pair went from 0.63 to 2.09 ms p50 (12,000 nodes, interleaved); the
        target kept is `extender_bench`'s HTTP p99 <= 10 ms with the same list each call.
        """
        with self._lock:
            self._expected = [e for e in self._expected if e[0] != raw]
            self._expected.insert(0, (raw, idx))
            del self._expected[EXPECTED_LISTS:]

    def recall(self, body: bytes, start: int, end: int) -> Resolution | None:
        """The resolution of a list whose bytes, body[start:end], this snapshot knows: one that
        came back before (its `raw` remembered), or one it was told to expect (resolved now,
        and remembered from then on)."""
        size = end - start
        with self._lock:
            for resolution in self._resolutions:
                if len(resolution.raw) == size and body.startswith(resolution.raw, start):
                    return resolution
            arrived = [
                pos
                for pos, (raw, _) in enumerate(self._expected)
                if len(raw) == size and body.startswith(raw, start)
            ]
            if not arrived:
                return None
            raw, idx = self._expected.pop(arrived[0])
        resolution = self.resolve(None, raw=raw, idx=idx)
        if not resolution.raw:
            resolution.raw = raw
        return resolution

    def remembered(self) -> list[Resolution]:
        """The cached resolutions whose raw NodeNames bytes are known, most recent first."""
        with self._lock:
            return [r for r in self._resolutions if r.raw]


def _same_list(
    cached: Resolution, idx: np.ndarray, all_known: bool, names: list[str] | None
) -> bool:
    """Whether a cached resolution is of the same candidate list (rows `idx`, `names` if given)."""
    if cached.count != idx.shape[0] or cached.all_known != all_known:
        return False
    if all_known:
        # A known name's row names it: equal rows, equal names. The first row rules out
        # most other lists before the whole comparison.
        return idx.shape[0] == 0 or (cached.idx[0] == idx[0] and np.array_equal(cached.idx, idx))
    return cached.names == names
