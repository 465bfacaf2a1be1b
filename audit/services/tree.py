"""The single writer's Merkle tree: the append's leaves added to the stored tiles, same transaction."""

from __future__ import annotations

from functools import reduce
from operator import or_

from django.db.models import Q

from audit import chain
from audit.models import Checkpoint, MerkleTile
from audit.selectors import tree_source
from audit.tree import merkle
from kiln.errors import Conflict


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


class CheckpointRefused(Conflict):
    """The tree to be signed does not extend the last signed one: signing it would fork the log."""

    code = "audit_checkpoint_refused"


def tree_check_consistent(*, size: int, root: bytes) -> None:
    """Raise CheckpointRefused unless the tree (size, root) extends the last checkpoint with a root."""
    last = (
        Checkpoint.objects.exclude(root_hash="")
        .order_by("-size", "-id")
        .values_list("size", "root_hash")
        .first()
    )
    if last is None:
        return
    old_size, old_root = last[0], bytes.fromhex(last[1])
    try:
        if old_size > size:
            raise merkle.ProofError(f"the tree has {size} leaves, fewer than the {old_size} signed")
        proof = merkle.consistency_proof(tree_source(), old_size, size) if old_size else []
        merkle.verify_consistency(old_size, size, old_root, root, proof)
    except merkle.ProofError as exc:
        raise CheckpointRefused(
            f"not signing size {size}: it is not consistent with the checkpoint at size "
            f"{old_size} ({exc})"
        ) from exc
