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

HASH_SIZE = 32
TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT  # hashes in a full tile
EMPTY_ROOT = hashlib.sha256(b"").digest()

# hash of the complete subtree at (level, index): leaves index << level .. (index + 1) << level
HashSource = Callable[[int, int], bytes]


class ProofError(ValueError):
    """A proof that does not verify, or a request for one that cannot exist."""


def leaf_hash(entry: bytes) -> bytes:
    """RFC 9162 leaf hash: SHA-256(0x00 || entry)."""
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


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


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], expected_root: bytes
) -> None:
    """RFC 9162 2.1.3.2: raise ProofError unless `proof` puts `leaf` at `index` under the root."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    _need_hash(leaf)
    _need_hash(expected_root)
    if computed_root(index, size, leaf, proof) != expected_root:
        raise ProofError(
            f"inclusion proof for index {index} does not match the root at size {size}"
        )


def computed_root(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root an inclusion proof leads to (ProofError if it has the wrong length)."""
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        _need_hash(p)
        if sn == 0:
            raise ProofError("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the tree is deep")
    return r


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 2.1.4.2: raise ProofError unless the tree at new_size extends the one at old_size."""
    if old_size > new_size:
        raise ProofError(f"size {old_size} is larger than size {new_size}")
    if old_size == 0:
        raise ProofError("a consistency proof from the empty tree proves nothing")
    if old_size == new_size:
        if proof:
            raise ProofError("a proof between equal sizes must be empty")
        if old_root != new_root:
            raise ProofError(f"two different roots at size {old_size}: the log forked")
        return
    if not proof:
        raise ProofError("empty consistency proof between different sizes")
    _need_hash(old_root)
    _need_hash(new_root)
    path = list(proof)
    for p in path:
        _need_hash(p)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("consistency proof is shorter than the tree is deep")
    if fr != old_root:
        raise ProofError(
            f"the tree at size {new_size} does not contain the tree at size {old_size}"
        )
    if sr != new_root:
        raise ProofError(f"consistency proof does not match the root at size {new_size}")


def _need_hash(value: bytes) -> None:
    if not isinstance(value, bytes | bytearray) or len(value) != HASH_SIZE:
        raise ProofError("a proof element, leaf or root is not a 32-byte hash")


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
        _need_hash(leaf)
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
