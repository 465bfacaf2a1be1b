"""Audit reads: the explorer's queries, chain status, writer lag, export segments, the Merkle tree."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet
from django.utils import timezone

from audit import chain
from audit.chain import renamed
from audit.models import (
    ChainEvent,
    Checkpoint,
    Cosignature,
    MerkleTile,
    OutboxEvent,
    VerificationRun,
)
from audit.tree import merkle
from kiln.errors import Conflict, InvalidInput, NotFound
from kiln.params import BIGINT_MAX


def writer_lag() -> dict[str, Any]:
    """Recorded-but-unchained events (outbox rows) and the age in seconds of the oldest."""
    agg = OutboxEvent.objects.aggregate(oldest=Min("recorded_at"))
    pending = OutboxEvent.objects.count()
    head = ChainEvent.objects.aggregate(head=Max("seq"))["head"] or 0
    oldest = agg["oldest"]
    lag = (timezone.now() - oldest).total_seconds() if oldest else 0.0
    return {"pending": pending, "lag_seconds": round(max(lag, 0.0), 3), "head_seq": head}


def chain_status() -> dict[str, Any]:
    """Head, last checkpoint, last verification and writer lag, for the status panel."""
    head = ChainEvent.objects.order_by("-seq").first()
    checkpoint = Checkpoint.objects.order_by("-size", "-id").first()
    verification = VerificationRun.objects.order_by("-finished_at").first()
    return {
        "head": head,
        "checkpoint": checkpoint,
        "checkpoint_behind": (head.seq - checkpoint.size) if head and checkpoint else None,
        "verification": verification,
        "lag": writer_lag(),
    }


@dataclass(frozen=True)
class EventFilter:
    """Explorer/API filters; every field optional."""

    since: datetime | None = None
    until: datetime | None = None
    actor: str = ""
    action: str = ""
    target: str = ""
    who: str = ""  # "" (people and system components), WHO_PEOPLE or WHO_SYSTEM


# Whose entries the explorer shows: people (any actor that is not a system component) or the
# system components (actors `system:<component>`, kiln.identity.actors.system_actor).
WHO_PEOPLE, WHO_SYSTEM = "people", "system"
WHO_CHOICES = (WHO_PEOPLE, WHO_SYSTEM)
SYSTEM_ACTOR_PREFIX = "system:"


def event_list(filters: EventFilter) -> QuerySet[ChainEvent]:
    """Chain entries matching the filters, newest first."""
    given = {
        "recorded_at__gte": filters.since,
        "recorded_at__lt": filters.until,
        "actor": filters.actor,
    }
    qs = ChainEvent.objects.filter(**{lookup: value for lookup, value in given.items() if value})
    if filters.who == WHO_PEOPLE:
        qs = qs.exclude(actor__startswith=SYSTEM_ACTOR_PREFIX)
    elif filters.who == WHO_SYSTEM:
        qs = qs.filter(actor__startswith=SYSTEM_ACTOR_PREFIX)
    # Renamed actions and targets (audit.chain.renamed) match under their old and new names.
    if filters.action and filters.action.endswith("."):
        prefixes = Q()
        for prefix in renamed.action_prefixes(filters.action):
            prefixes |= Q(action__startswith=prefix)
        qs = qs.filter(prefixes)
    elif filters.action:
        qs = qs.filter(action__in=renamed.action_names(filters.action))
    if filters.target:
        qs = qs.filter(target__in=renamed.target_names(filters.target))
    return qs.order_by("-seq")


def event_page(
    filters: EventFilter, *, before: int | None, limit: int
) -> tuple[list[ChainEvent], int | None]:
    """One page of `event_list` by seq cursor: entries with seq < `before`, and the next cursor."""
    qs = event_list(filters)
    if before is not None:
        qs = qs.filter(seq__lt=before)
    rows = list(qs[: limit + 1])
    next_cursor = rows[limit - 1].seq if len(rows) > limit else None
    return rows[:limit], next_cursor


def event_detail(seq: int) -> tuple[ChainEvent | None, ChainEvent | None, ChainEvent | None]:
    """An entry and its neighbours (seq-1, seq+1); none for a seq no `bigint` column holds."""
    if not 1 <= seq < BIGINT_MAX:
        return None, None, None
    rows = {e.seq: e for e in ChainEvent.objects.filter(seq__in=[seq - 1, seq, seq + 1])}
    return rows.get(seq), rows.get(seq - 1), rows.get(seq + 1)


def encode_cursor(seq: int | None) -> str | None:
    """An opaque pagination cursor."""
    return (
        None
        if seq is None
        else base64.urlsafe_b64encode(json.dumps({"b": seq}).encode()).decode().rstrip("=")
    )


MAX_CURSOR_LENGTH = 64  # a cursor Kiln issues is ~30 characters


def decode_cursor(cursor: str | None) -> int | None:
    """The seq inside an opaque cursor; InvalidInput for a forged one (also a seq past the
    `bigint` column, or a cursor too long to be one Kiln issued)."""
    if not cursor:
        return None
    invalid = InvalidInput(
        "invalid cursor", extra={"parameter": "cursor", "fields": {"cursor": ["invalid cursor"]}}
    )
    if len(cursor) > MAX_CURSOR_LENGTH:
        raise invalid
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))["b"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BIGINT_MAX:
            raise ValueError
        return value
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise invalid from exc


@dataclass(frozen=True)
class Segment:
    """A contiguous run of the chain for export, widened to signed checkpoints at both ends."""

    first_seq: int
    last_seq: int
    checkpoints: list[Checkpoint]
    # Entries in the range past last_seq that no checkpoint signs yet (left out; export later).
    unsigned: int = 0


def export_segment(since: datetime | None, until: datetime | None) -> Segment | None:
    """The seq range holding every entry recorded in [since, until), widened to checkpoints.

    The start moves back to just after the latest checkpoint below it (so a signature
    vouches for the first prev_hash) and the end forward to the first checkpoint at or
    after it (so a signature covers the last entry). When the range's newest entries are not
    signed yet, the segment ends at the newest checkpoint inside the range and counts the rest
    as `unsigned`: an export verifies offline as soon as it is taken, never "not covered".
    None when nothing matches.
    """
    qs = ChainEvent.objects.all()
    if since:
        qs = qs.filter(recorded_at__gte=since)
    if until:
        qs = qs.filter(recorded_at__lt=until)
    bounds = qs.aggregate(lo=Min("seq"), hi=Max("seq"))
    if bounds["lo"] is None:
        return None
    lo, hi = bounds["lo"], bounds["hi"]
    before = (
        Checkpoint.objects.filter(size__lt=lo)
        .order_by("-size")
        .values_list("size", flat=True)
        .first()
    )
    after = (
        Checkpoint.objects.filter(size__gte=hi)
        .order_by("size")
        .values_list("size", flat=True)
        .first()
    )
    first = before + 1 if before is not None else 1
    last, unsigned = (after, 0) if after is not None else (hi, 0)
    if after is None:
        inside = (
            Checkpoint.objects.filter(size__gte=lo, size__lt=hi)
            .order_by("-size")
            .values_list("size", flat=True)
            .first()
        )
        if inside is not None:
            last, unsigned = inside, qs.filter(seq__gt=inside).count()
    checkpoints = list(
        Checkpoint.objects.filter(size__gte=first - 1, size__lte=last).order_by("size", "id")
    )
    return Segment(first, last, checkpoints, unsigned)


# --- the Merkle tree (audit/tree/merkle.py; its tiles are written by the audit writer) ----------


def tree_size() -> int:
    """Leaves in the Merkle tree: the chain's length (both grow in the writer's transaction)."""
    return ChainEvent.objects.aggregate(head=Max("seq"))["head"] or 0


def tile_read(*, level: int, index: int) -> bytes:
    """The stored hashes of tile level/index (b"" when there is none yet)."""
    hashes = MerkleTile.objects.filter(level=level, index=index).values_list("hashes", flat=True)
    found = hashes.first()
    return bytes(found) if found is not None else b""


def tree_source() -> merkle.HashSource:
    """Complete-subtree hashes read from the stored tiles, each tile once."""
    return merkle.tile_source(lambda level, index: tile_read(level=level, index=index))


def prefetched_source(plan: Callable[[merkle.HashSource], object]) -> merkle.HashSource:
    """A HashSource holding every tile `plan` (a proof computation) reads, read in one query.

    The tiles a proof needs depend only on the sizes, so `plan` runs once over placeholder
    hashes to name them. One round trip instead of one a tile: a proof at 1M entries reads
    six or seven tiles (proof serving's p99 target, 5 ms over HTTP).
    """
    keys: set[tuple[int, int]] = set()

    def placeholder(level: int, index: int) -> bytes:
        tile_level, rise = divmod(level, merkle.TILE_HEIGHT)
        keys.add((tile_level, (index << rise) // merkle.TILE_WIDTH))
        return bytes(merkle.HASH_SIZE)

    plan(placeholder)
    tiles: dict[tuple[int, int], bytes] = {}
    if keys:
        query = reduce(or_, (Q(level=level, index=index) for level, index in keys))
        rows = MerkleTile.objects.filter(query).values_list("level", "index", "hashes")
        tiles = {(level, index): bytes(hashes) for level, index, hashes in rows}
    return merkle.tile_source(lambda level, index: tiles.get((level, index), b""))


def tree_root(*, size: int) -> bytes:
    """MTH of the first `size` entries (size <= the tree's size)."""
    return merkle.root(tree_source(), size)


def _tree_prefix(size: int | None, label: str) -> int:
    """`size`, or the whole tree's when None; InvalidInput (400) unless 1 <= size <= the tree's
    size (`label` names the parameter in the reason, `{}` standing for its value)."""
    current = tree_size()
    size = current if size is None else size
    if not 1 <= size <= current:
        raise InvalidInput(f"{label.format(size)} is not between 1 and the tree size {current}")
    return size


def inclusion_proof(*, seq: int, size: int | None = None) -> tuple[int, list[bytes], bytes]:
    """(size, PATH(seq - 1, D[size]), root) for chain entry `seq`; size defaults to the whole tree.

    InvalidInput (400) names the reason when seq or size lies outside the tree.
    """
    size = _tree_prefix(size, "size {}")
    if not 1 <= seq <= size:
        raise InvalidInput(f"seq {seq} is not in a tree of size {size} (seq runs from 1)")
    source = prefetched_source(
        lambda src: (merkle.inclusion_proof(src, seq - 1, size), merkle.root(src, size))
    )
    return size, merkle.inclusion_proof(source, seq - 1, size), merkle.root(source, size)


def consistency_proof(*, old: int, new: int | None = None) -> tuple[int, list[bytes], bytes, bytes]:
    """(new, PROOF(old, D[new]), old root, new root); new defaults to the whole tree."""
    new = _tree_prefix(new, "to={}")
    if not 1 <= old <= new:
        raise InvalidInput(f"from={old} is not between 1 and to={new}")
    source = prefetched_source(
        lambda src: (merkle.consistency_proof(src, old, new), merkle.root(src, old),
                     merkle.root(src, new))
    )  # fmt: skip
    proof = merkle.consistency_proof(source, old, new)
    return new, proof, merkle.root(source, old), merkle.root(source, new)


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def event_inclusion(*, seq: int, size: int | None = None) -> dict[str, Any]:
    """Entry `seq`'s inclusion proof at `size`, base64, with the checkpoint signed at that size."""
    size, proof, root = inclusion_proof(seq=seq, size=size)
    leaf = tile_hashes(level=0, index=(seq - 1) // merkle.TILE_WIDTH, width=None)
    offset = ((seq - 1) % merkle.TILE_WIDTH) * merkle.HASH_SIZE
    signed = Checkpoint.objects.filter(size=size).exclude(root_hash="").order_by("-id").first()
    note = cosigned_note(signed) if signed is not None else None
    return {
        "seq": seq,
        "index": seq - 1,
        "size": size,
        "root": _b64(root),
        "leaf_hash": _b64(leaf[offset : offset + merkle.HASH_SIZE]),
        "proof": [_b64(p) for p in proof],
        "checkpoint": note,
    }


def event_proof_bundle(*, seq: int) -> dict[str, Any]:
    """Entry `seq` with its inclusion proof at the signed tree that holds it and most witnesses
    cosigned (the newest among equals), the checkpoint with their cosignatures (404 if none)."""
    row = ChainEvent.objects.filter(seq=seq).first() if 1 <= seq <= BIGINT_MAX else None
    signed = best_witnessed_checkpoint(seq=seq) if row is not None else None
    if row is None or signed is None:
        raise NotFound(f"no signed checkpoint covers seq {seq} yet")
    bundle = {**event_inclusion(seq=seq, size=signed.size), "checkpoint": cosigned_note(signed)}
    entry = chain.entry_bytes(
        row.seq, str(row.event_id), chain.format_time(row.recorded_at), row.actor, row.action,
        row.target, row.data, row.trace_id,
    )  # fmt: skip
    return {**bundle, "entry": entry.decode("utf-8")}


def latest_tree_checkpoint() -> Checkpoint | None:
    """The newest checkpoint that carries a Merkle root."""
    return Checkpoint.objects.exclude(root_hash="").order_by("-size", "-id").first()


# --- witnesses (audit/witness/protocol.py; cosignatures stored by audit.services.witnessing) ------------


def cosigned_note(checkpoint: Checkpoint) -> str:
    """The checkpoint's signed note with every stored witness cosignature line after the log's."""
    lines = checkpoint.cosignatures.order_by("witness").values_list("line", flat=True)
    return checkpoint.note + "".join(lines)


def best_witnessed_checkpoint(*, seq: int) -> Checkpoint | None:
    """Of the checkpoints with a root that cover `seq`, the one most witnesses cosigned (newest first
    among equals), so a bundle meets the highest quorum it can; None when none covers it."""
    best = (
        Cosignature.objects.filter(checkpoint__size__gte=seq)
        .values("checkpoint")
        .annotate(n=Count("id"))
        .order_by("-n", "-checkpoint__size", "-checkpoint")
        .values_list("checkpoint", flat=True)
        .first()
    )
    if best is not None:
        return Checkpoint.objects.get(pk=best)
    latest = latest_tree_checkpoint()
    return latest if latest is not None and latest.size >= seq else None


def tile_hashes(*, level: int, index: int, width: int | None) -> bytes:
    """The first `width` hashes of tile level/index (all it holds when None); 404 until it has them."""
    stored = tile_read(level=level, index=index)
    if width is None:
        return stored
    if len(stored) < width * merkle.HASH_SIZE:
        raise NotFound(f"tile {level}/{index} does not hold {width} hashes yet")
    return stored[: width * merkle.HASH_SIZE]


def entry_bundle(*, index: int, width: int) -> bytes:
    """Entries 256*index .. +width (seq = entry index + 1), each as a big-endian uint16 length and
    the canonical entry (C2SP tlog-tiles entry bundle); 404 until the chain has them all."""
    first = index * merkle.TILE_WIDTH + 1
    rows = list(
        ChainEvent.objects.filter(seq__gte=first, seq__lt=first + width)
        .order_by("seq")
        .values_list(*chain.ROW_COLUMNS[:8])
    )
    if len(rows) != width:
        raise NotFound(f"entry bundle {index} does not hold {width} entries yet")
    out = bytearray()
    for seq, event_id, at, actor, action, target, data, trace_id in rows:
        entry = chain.entry_bytes(
            seq, str(event_id), chain.format_time(at), actor, action, target, data, trace_id
        )
        if len(entry) > 0xFFFF:
            raise Conflict(f"entry {seq} is longer than an entry bundle can carry (64 KiB)")
        out += len(entry).to_bytes(2, "big") + entry
    return bytes(out)
