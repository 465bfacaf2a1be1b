"""The single writer's Merkle tree: the append's leaves added to the stored tiles, same transaction."""

from __future__ import annotations

from functools import reduce
from operator import or_

from django.db.models import Q

from audit import chain, merkle
from audit.models import MerkleTile


def tree_extend(*, size: int, entries: list[chain.Entry]) -> None:
    """Add the entries (seq size+1 onwards) as leaves to the tree of `size` leaves, tiles upserted.

    Called by `chain_append` inside its transaction, so the chain and the tree commit together
    or not at all; the tiles' triggers refuse any change that is not growth.
    """
    if not entries:
        return
    if entries[0].seq != size + 1:
        raise ValueError(f"the tree has {size} leaves; seq {entries[0].seq} is not the next one")
    leaves = [merkle.leaf_hash(entry.body()) for entry in entries]
    changed = merkle.extend_tiles(size, tree_right_edge(size=size), leaves)
    MerkleTile.objects.bulk_create(
        [
            MerkleTile(level=lvl, index=idx, hashes=content)
            for (lvl, idx), content in changed.items()
        ],
        update_conflicts=True,
        unique_fields=["level", "index"],
        update_fields=["hashes"],
    )


def tree_right_edge(*, size: int) -> dict[int, bytes]:
    """The stored partial tiles on the right edge of a tree of `size` leaves, by level."""
    wanted = {}
    for level in range(merkle.tile_levels(size)):
        full, width = merkle.tile_counts(size, level)
        if width:
            wanted[level] = full
    if not wanted:
        return {}
    query = reduce(or_, (Q(level=lvl, index=idx) for lvl, idx in wanted.items()))
    found = {
        lvl: bytes(h) for lvl, h in MerkleTile.objects.filter(query).values_list("level", "hashes")
    }
    # A stored tile that does not hold exactly the hashes a tree of `size` leaves has is refused
    # by `extend_tiles`: the writer stops rather than build on a tree that disagrees with the chain.
    return {lvl: found.get(lvl, b"") for lvl in wanted}
