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
  * the `names.NameTable` that looks up long lists from their JSON bytes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from scheduler import scoring
from scheduler.extender.encoding import host_entries, names_are_plain, padded_items
from scheduler.extender.names import NameTable

# How many distinct candidate lists one snapshot keeps resolved.
RESOLUTION_CACHE_SIZE = 8
# How many encoded failure maps one resolution keeps (one per workload-class outcome).
MAPS_PER_RESOLUTION = 4
# Lists at least this long are looked up from their JSON bytes (`NameTable`); shorter ones
# name by name, which is as fast below it (crossover near 700-1,000 names, measured on
# other names and seeds than the benchmark reports on).
TABLE_LOOKUP_MIN = 1024


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
    """

    names: list[str]
    idx: np.ndarray
    usable: np.ndarray
    rows: np.ndarray
    all_known: bool
    plain: bool
    # How often an equal list was resolved again (see `NodeSnapshot.resolve`).
    hits: int = 0
    # The exact bytes of the NodeNames array this list came in (b"" until verified).
    raw: bytes = b""
    _priced: np.ndarray | None = field(default=None, repr=False)
    _maps: dict[bytes, tuple[bytes, int]] = field(default_factory=dict, repr=False)

    def priced_rows(self, snapshot: NodeSnapshot) -> np.ndarray:
        """`rows` with unpriced candidates charged the highest known price (read-only)."""
        if self._priced is None:
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

    # Per node, the JSON text '{"Host":"<name>","Score":' (built on first use).
    _host_entries: np.ndarray | None = field(default=None, repr=False, compare=False)
    # The names as an array-keyed hash table (built on first use).
    _name_table: NameTable | None = field(default=None, repr=False, compare=False)
    # Space-padded JSON items per node, by kind (see `padded_items`).
    _padded: dict[str, np.ndarray | None] = field(default_factory=dict, repr=False, compare=False)
    # Recently resolved candidate lists, most recent first (see `resolve`).
    _resolutions: list[Resolution] = field(default_factory=list, repr=False, compare=False)
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

    def resolve(self, names: list[str], raw: bytes | None = None) -> Resolution:
        """The `Resolution` of a candidate list, from the cache when an equal list was seen.

        A hit costs one C-level list comparison instead of a dict lookup per name;
        equality is exact (same names, same order), so a hit is never a guess.
        `raw`, the JSON array the names were decoded from, lets a long list be looked
        up as bytes (`NameTable`) instead of name by name; the rows are the same.
        """
        n = len(names)
        with self._lock:
            for pos, cached in enumerate(self._resolutions):
                if len(cached.names) == n and cached.names == names:
                    cached.hits += 1
                    if pos:
                        self._resolutions.insert(0, self._resolutions.pop(pos))
                    return cached
        idx = None
        if raw is not None and n >= TABLE_LOOKUP_MIN:
            idx = self.name_table().lookup(raw, n)
        if idx is None:
            idx = np.fromiter(map(self.index.get, names, repeat(-1)), dtype=np.int64, count=n)
        usable = idx >= 0
        if len(self.names):
            # take: several times faster than fancy indexing here; an unknown (-1) takes row 0.
            rows = self.matrix.take(idx, axis=0, mode="clip")
        else:
            rows = np.zeros((n, len(scoring.NodeArrays.COLUMNS)))
        for array in (idx, usable, rows):
            array.flags.writeable = False
        resolution = Resolution(
            names=list(names),
            idx=idx,
            usable=usable,
            rows=rows,
            all_known=bool(usable.all()),
            # A backslash-free JSON array of strings holds no name that needs escaping.
            plain=b"\\" not in raw if raw is not None else names_are_plain(names),
        )
        with self._lock:
            self._resolutions.insert(0, resolution)
            del self._resolutions[RESOLUTION_CACHE_SIZE:]
        return resolution

    def remembered(self) -> list[Resolution]:
        """The cached resolutions whose raw NodeNames bytes are known, most recent first."""
        with self._lock:
            return [r for r in self._resolutions if r.raw]
