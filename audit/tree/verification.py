"""Verifying the stored Merkle tree against the chain (audit_verify): every tile, every signed root.

The tree is rebuilt from the chain's own rows (leaf i = SHA-256(0x00 || entry of seq i + 1)),
grown tile by tile as the writer grows it (`merkle.extend_tiles`); each tile the chain's tree
has is compared with the stored one as soon as it is complete, the right edge at the end, and
a stored tile the chain's tree does not have is reported too. Once every tile agrees, each
checkpoint's signed root is recomputed from the tiles at its size. The first disagreement is
named: the tile, the hash in it and the seqs below it, or the checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Max

from audit import chain
from audit.chain import notes
from audit.models import Checkpoint, MerkleTile
from audit.selectors import tree_source
from audit.tree import merkle

TILE_BYTES = merkle.TILE_WIDTH * merkle.HASH_SIZE


@dataclass
class TreeReport:
    """What the tree check found: leaves rebuilt, tiles and signed roots compared, first problem."""

    size: int
    tiles: int
    roots: int
    problem: chain.Problem | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def message(self) -> str:
        if self.problem:
            return f"tree: {self.problem}"
        return (
            f"tree: {self.tiles} tiles and {self.roots} signed roots agree with {self.size} entries"
        )


def advance_edge(edge: dict[int, bytes], changed: dict[tuple[int, int], bytes]) -> None:
    """Move a right edge (`merkle.extend_tiles`' argument) past the tiles it just returned."""
    for (level, _index), content in sorted(changed.items()):
        if len(content) == TILE_BYTES:
            edge.pop(level, None)  # full: the level's next tile starts empty
        else:
            edge[level] = content


def _leaves_below(level: int, index: int) -> tuple[int, int]:
    """The leaf indexes [first, last] under hash `index` of tile level `level` (height 8 * level)."""
    height = merkle.TILE_HEIGHT * level
    return index << height, ((index + 1) << height) - 1


def tile_difference(
    level: int, index: int, stored: bytes | None, rebuilt: bytes
) -> chain.Problem | None:
    """The first place where a stored tile differs from the chain's, named; None when equal."""
    place = f"tile {level}/{index}"
    if stored is None:
        first, _ = _leaves_below(level, index * merkle.TILE_WIDTH)
        return chain.Problem(first + 1, f"{place} is missing from the stored tree")
    if stored == rebuilt:
        return None
    for j in range(min(len(stored), len(rebuilt)) // merkle.HASH_SIZE):
        at = slice(j * merkle.HASH_SIZE, (j + 1) * merkle.HASH_SIZE)
        if stored[at] != rebuilt[at]:
            break
    else:
        j = min(len(stored), len(rebuilt)) // merkle.HASH_SIZE
        first, _ = _leaves_below(level, index * merkle.TILE_WIDTH + j)
        return chain.Problem(
            first + 1,
            f"{place} holds {len(stored) // merkle.HASH_SIZE} hashes where the chain's tree has "
            f"{len(rebuilt) // merkle.HASH_SIZE}",
        )
    first, last = _leaves_below(level, index * merkle.TILE_WIDTH + j)
    if level == 0:
        reason = f"{place}, hash {j}: not the leaf hash of the chain's entry at seq {first + 1}"
    else:
        reason = (
            f"{place}, hash {j}: not the tree of the chain's entries at seq {first + 1}..{last + 1}"
        )
    return chain.Problem(first + 1, reason)


def _stored(keys: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """The stored tiles among `keys`, by (level, index)."""
    out: dict[tuple[int, int], bytes] = {}
    for level in {lvl for lvl, _ in keys}:
        indexes = [idx for lvl, idx in keys if lvl == level]
        rows = MerkleTile.objects.filter(level=level, index__in=indexes)
        out.update({(level, idx): bytes(h) for idx, h in rows.values_list("index", "hashes")})
    return out


def _compare(tiles: dict[tuple[int, int], bytes]) -> chain.Problem | None:
    stored = _stored(sorted(tiles))
    problems = [tile_difference(lvl, idx, stored.get((lvl, idx)), content)
                for (lvl, idx), content in sorted(tiles.items())]  # fmt: skip
    found = [p for p in problems if p]
    return min(found, key=lambda p: p.seq) if found else None


def _beyond(size: int) -> chain.Problem | None:
    """A stored tile the chain's tree of `size` leaves does not have (a tree ahead of the chain)."""
    levels = MerkleTile.objects.aggregate(top=Max("level"))["top"]
    for level in range(0 if levels is None else levels + 1):
        full, partial = merkle.tile_counts(size, level)
        extra = (
            MerkleTile.objects.filter(level=level, index__gte=full + (1 if partial else 0))
            .order_by("index")
            .values_list("index", flat=True)
            .first()
        )
        if extra is not None:
            return chain.Problem(
                size + 1, f"tile {level}/{extra} is not in the chain's tree of {size} entries "
                "(the stored tree runs ahead of the chain)",
            )  # fmt: skip
    return None


def _roots(size: int) -> tuple[int, chain.Problem | None]:
    """Each checkpoint's signed Merkle root at its size, against the (verified) stored tiles."""
    source, checked = tree_source(), 0
    for cp in (
        Checkpoint.objects.exclude(root_hash="").filter(size__lte=size).order_by("size", "id")
    ):
        try:
            signed = notes.parse(cp.note)[0].root_hash
        except notes.NoteError:
            continue  # an unreadable note is the chain check's to report (signed_checkpoints)
        if signed != cp.root_hash:
            return checked, chain.Problem(
                cp.size, f"checkpoint #{cp.id}: its stored root is not the root its note signs"
            )
        if merkle.root(source, cp.size).hex() != signed:
            return checked, chain.Problem(
                cp.size, f"checkpoint #{cp.id} at size {cp.size}: its signed Merkle root is not "
                f"the root of the chain's entries 1..{cp.size}",
            )  # fmt: skip
        checked += 1
    return checked, None


def verify_tree(chunks: Iterable[list[tuple]]) -> TreeReport:
    """Rebuild the tree from the chain's rows (`verification.iter_rows`, in seq order, read in one
    transaction) and compare it with the stored tiles and every checkpoint's signed root."""
    size, edge, tiles = 0, {}, 0
    for chunk in chunks:
        leaves = [merkle.leaf_hash(chain.entry_bytes(*row[:8])) for row in chunk]
        changed = merkle.extend_tiles(size, edge, leaves)
        size += len(leaves)
        done = {key: content for key, content in changed.items() if len(content) == TILE_BYTES}
        advance_edge(edge, changed)
        problem = _compare(done)
        tiles += len(done)
        if problem:
            return TreeReport(size, tiles, 0, problem)
    partial = {
        (level, merkle.tile_counts(size, level)[0]): content
        for level, content in edge.items()
        if content
    }
    problem = _compare(partial) or _beyond(size)
    tiles += len(partial)
    if problem:
        return TreeReport(size, tiles, 0, problem)
    roots, problem = _roots(size)
    return TreeReport(size, tiles, roots, problem)
