"""The audit log as an RFC 6962 / RFC 9162 Merkle tree, without Django: hashes, proofs, tiles.

Hashing (RFC 9162 section 2.1.1), over the chain's canonical entries (`chain.entry_bytes`):

    leaf(entry)        = SHA-256(0x00 || entry)
    node(left, right)  = SHA-256(0x01 || left || right)
    MTH({})            = SHA-256("")
    MTH(D[n]), n > 1   = node(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two < n

Proofs are RFC 9162 PATH (inclusion, 2.1.3) and PROOF/SUBPROOF (consistency, 2.1.4); their
verifiers are the RFC's algorithms. Every hash a proof needs is the hash of a complete subtree
(`HashSource`), so a prover needs only the stored tiles (C2SP tlog-tiles, https://c2sp.org/tlog-tiles):
tile L/N holds the hashes of the complete subtrees of height 8L numbered 256N .. 256N+255,
one tile of height 8 per 256 of them; a tile not yet full is served as `L/N.p/W`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence

from audit.tree.tlog_verify import (  # the verifying half lives in the standalone verifier
    HASH_SIZE,
    ProofError,
    computed_root,
    leaf_hash,
    need_hash,
    node_hash,
    verify_consistency,
    verify_inclusion,
)

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT  # hashes in a full tile
EMPTY_ROOT = hashlib.sha256(b"").digest()

__all__ = [  # re-exported: the verifying half lives in audit/tree/tlog_verify.py
    "ProofError", "computed_root", "leaf_hash", "node_hash", "verify_consistency", "verify_inclusion",
]  # fmt: skip

# hash of the complete subtree at (level, index): leaves index << level .. (index + 1) << level
HashSource = Callable[[int, int], bytes]


def _split(n: int) -> int:
    """The largest power of two strictly below n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def range_hash(source: HashSource, lo: int, hi: int) -> bytes:
    """MTH of leaves [lo, hi), where lo is a multiple of the smallest power of two >= hi - lo.

    Every range the RFC's proofs name has that shape; it is cut into complete subtrees.
    """
    n = hi - lo
    if n <= 0:
        return EMPTY_ROOT
    if n & (n - 1) == 0:
        level = n.bit_length() - 1
        return source(level, lo >> level)
    k = _split(n)
    return node_hash(range_hash(source, lo, lo + k), range_hash(source, lo + k, hi))


def root(source: HashSource, size: int) -> bytes:
    """The tree head MTH(D[size])."""
    return range_hash(source, 0, size)


def inclusion_proof(source: HashSource, index: int, size: int) -> list[bytes]:
    """RFC 9162 PATH(index, D[size]): sibling hashes from the leaf up (ceil(log2 size) at most)."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    proof: list[bytes] = []
    lo, hi, m = 0, size, index
    while hi - lo > 1:
        k = _split(hi - lo)
        if m - lo < k:
            proof.append(range_hash(source, lo + k, hi))
            hi = lo + k
        else:
            proof.append(range_hash(source, lo, lo + k))
            lo += k
    proof.reverse()
    return proof


def consistency_proof(source: HashSource, old_size: int, new_size: int) -> list[bytes]:
    """RFC 9162 PROOF(old_size, D[new_size]) for 0 < old_size <= new_size ([] when equal)."""
    if not 0 < old_size <= new_size:
        raise ProofError(
            f"no consistency proof from size {old_size} to size {new_size} (needs 0 < from <= to)"
        )
    proof: list[bytes] = []
    lo, hi, m, whole = 0, new_size, old_size, True
    while m != hi:
        k = _split(hi - lo)
        if m - lo <= k:
            proof.append(range_hash(source, lo + k, hi))
            hi = lo + k
        else:
            proof.append(range_hash(source, lo, lo + k))
            lo, whole = lo + k, False
    if not whole:
        proof.append(range_hash(source, lo, hi))
    proof.reverse()
    return proof


# --- tiles (C2SP tlog-tiles) ----------------------------------------------------------------

_TILE_PATH = re.compile(r"^(?:x\d{3}/)*\d{3}(?:\.p/(\d{1,3}))?$")


def tile_index_path(index: int, width: int = TILE_WIDTH) -> str:
    """The `<N>[.p/<W>]` part of a tile path: N in groups of three digits, `x` before all but the last."""
    digits = f"{index:03d}"
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    path = "/".join([f"x{g}" for g in groups[:-1]] + groups[-1:])
    return path if width == TILE_WIDTH else f"{path}.p/{width}"


def parse_tile_index(text: str) -> tuple[int, int]:
    """(N, W) from `<N>[.p/<W>]`; ValueError names what is wrong (W is 256 for a full tile)."""
    match = _TILE_PATH.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a tile index (x001/x234/067[.p/W])")
    width = int(match.group(1)) if match.group(1) else TILE_WIDTH
    if not 1 <= width < TILE_WIDTH and match.group(1):
        raise ValueError(f"partial tile width {width} is not in 1..255")
    number = text.split(".p/")[0]
    index = int(number.replace("x", "").replace("/", ""))
    if tile_index_path(index, width) != text:
        raise ValueError(f"{text!r} is not the canonical path of tile {index}")
    return index, width


def tile_counts(size: int, level: int) -> tuple[int, int]:
    """(full tiles, width of the partial tile or 0) at a tile level for a tree of `size` leaves."""
    hashes = size >> (TILE_HEIGHT * level)
    return hashes // TILE_WIDTH, hashes % TILE_WIDTH


def tile_levels(size: int) -> int:
    """How many tile levels a tree of `size` leaves has (0 for the empty tree)."""
    levels = 0
    while size >> (TILE_HEIGHT * levels):
        levels += 1
    return levels


def extend_tiles(
    size: int, right_edge: dict[int, bytes], leaves: Iterable[bytes]
) -> dict[tuple[int, int], bytes]:
    """Append leaf hashes to a tree of `size` leaves; return the tiles (level, index) -> hashes changed.

    `right_edge[level]` is the content of the rightmost, not yet full tile at each level (absent
    when that level has none). A tile that fills up adds the root of its 256 hashes (a complete
    subtree of height 8) to the level above. Full tiles never change again and a partial tile
    only grows, so a stored tile's content is a prefix of every later content of that tile.
    """
    for level in range(max([*right_edge, tile_levels(size)], default=0) + 1):
        width = tile_counts(size, level)[1]
        if len(right_edge.get(level, b"")) != width * HASH_SIZE:
            raise ValueError(
                f"tile level {level} of a tree of size {size} must hold {width} hashes"
            )
    edge = {level: bytearray(content) for level, content in right_edge.items()}
    changed: dict[tuple[int, int], bytearray | bytes] = {}
    for leaf in leaves:
        need_hash(leaf)
        level, value, position = 0, leaf, size  # `value` is hash number `position` of its level
        while True:
            tile = edge.setdefault(level, bytearray())
            tile += value
            index = position // TILE_WIDTH
            changed[(level, index)] = tile
            if len(tile) < TILE_WIDTH * HASH_SIZE:
                break
            changed[(level, index)] = bytes(tile)
            value = subtree_root(bytes(tile))
            edge[level] = bytearray()
            level, position = level + 1, index
        size += 1
    return {key: bytes(content) for key, content in changed.items()}


def subtree_root(tile: bytes) -> bytes:
    """The root of a full tile: the hash of its complete subtree of height 8."""
    level = [tile[i : i + HASH_SIZE] for i in range(0, len(tile), HASH_SIZE)]
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def tile_source(load: Callable[[int, int], bytes]) -> HashSource:
    """A HashSource over tiles: `load(tile_level, tile_index)` returns a tile's hashes (full or partial).

    A subtree whose height is not a multiple of 8 is hashed up from the tile below it (at most
    255 hashes); tiles are loaded once per source.
    """
    tiles: dict[tuple[int, int], bytes] = {}

    def source(level: int, index: int) -> bytes:
        tile_level, rise = divmod(level, TILE_HEIGHT)
        first, count = index << rise, 1 << rise
        key = (tile_level, first // TILE_WIDTH)
        if key not in tiles:
            tiles[key] = load(*key)
        offset = (first % TILE_WIDTH) * HASH_SIZE
        hashes = tiles[key][offset : offset + count * HASH_SIZE]
        if len(hashes) != count * HASH_SIZE:
            raise ProofError(f"tile {key[0]}/{key[1]} does not cover subtree {level}/{index}")
        return subtree_root(hashes)

    return source


def memory_source(leaves: Sequence[bytes]) -> HashSource:
    """A HashSource over leaf hashes held in memory (tests, the offline verifier, benchmarks)."""
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])

    def source(level: int, index: int) -> bytes:
        try:
            return levels[level][index]
        except IndexError:
            raise ProofError(f"subtree {level}/{index} is not complete") from None

    return source
