"""Audit tables. The outbox row is written in the caller's transaction."""

from __future__ import annotations

import uuid

from django.db import models


class OutboxEvent(models.Model):
    """An audit event recorded beside the change it describes, awaiting publication to the topic."""

    event_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    recorded_at = models.DateTimeField()
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=200)
    target = models.CharField(max_length=300)
    data = models.JSONField(default=dict)
    data_jcs = models.TextField(
        blank=True, default=""
    )  # RFC 8785 text of `data`, as it will be hashed
    trace_id = models.CharField(max_length=32, blank=True, default="")
    published_at = models.DateTimeField(null=True, blank=True)  # indexed with id below

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["published_at", "id"], name="audit_outbox_pending")]

    def __str__(self) -> str:
        return f"{self.action} {self.target} by {self.actor}"


class ChainEvent(models.Model):
    """One entry of the hash chain. Append-only: database triggers reject UPDATE, DELETE,
    TRUNCATE and any INSERT that does not extend the head (seq = head + 1, prev_hash = head hash).

    `data` holds the RFC 8785 canonical JSON text of the event data, exactly as hashed.
    """

    seq = models.BigIntegerField(primary_key=True)
    event_id = models.UUIDField(unique=True)
    recorded_at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=200)  # indexed below, exact match only
    action = models.CharField(max_length=200, db_index=True)  # also by prefix (`action__startswith`)
    target = models.CharField(max_length=300)  # indexed below, exact match only
    data = models.TextField()
    trace_id = models.CharField(max_length=32, blank=True, default="")
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["seq"]
        # Plain B-trees: the explorer filters actor and target by equality, so the
        # `varchar_pattern_ops` copies that `db_index=True` adds on PostgreSQL (for LIKE) would
        # only be two more indexes for the single writer to update on every append.
        indexes = [
            models.Index(fields=["actor"], name="audit_chain_actor"),
            models.Index(fields=["target"], name="audit_chain_target"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.action} {self.target} by {self.actor}"


class MerkleTile(models.Model):
    """One C2SP tlog tile of the chain's RFC 6962 Merkle tree (audit/tree/merkle.py).

    Tile `level`/`index` holds the hashes of complete subtrees of height 8 * level, numbered
    256 * index onwards, 32 bytes each (level 0: the leaf hashes of the chain's canonical
    entries, leaf i being seq i + 1). Written by the audit writer in the transaction that
    appends the entries; a tile only grows (database triggers reject any other change).
    """

    level = models.PositiveSmallIntegerField()
    index = models.BigIntegerField()
    hashes = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["level", "index"], name="audit_merkletile_unique")
        ]

    def __str__(self) -> str:
        return f"tile {self.level}/{self.index} ({len(self.hashes) // 32} hashes)"


class Checkpoint(models.Model):
    """A signed statement (C2SP tlog-checkpoint) of the log's size, tree root and chain head at a time."""

    size = models.BigIntegerField(db_index=True)
    head_hash = models.CharField(max_length=64)  # the hash chain's head at `size`
    root_hash = models.CharField(max_length=64, blank=True, default="")  # Merkle root; "" before it
    signed_at = models.DateTimeField()
    note = models.TextField()
    anchored = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["size", "id"]

    def __str__(self) -> str:
        return f"checkpoint {self.size} {self.head_hash[:12]}"


class Cosignature(models.Model):
    """A witness's C2SP tlog-cosignature/v1 on one signed checkpoint, verified before it is stored.

    The witness checked that the checkpoint's tree extends every tree it cosigned before
    (audit/witness/protocol.py); `line` is its signature line as sent, appended to the checkpoint's note
    when the log serves it, so a verifier can require a quorum of witnesses.
    """

    checkpoint = models.ForeignKey(
        Checkpoint, on_delete=models.PROTECT, related_name="cosignatures"
    )
    witness = models.CharField(max_length=200)  # the witness key's name
    key_id = models.CharField(max_length=8)  # the 4-byte key hash, hex
    timestamp = models.BigIntegerField()  # the witness's signed time, seconds since the epoch
    line = models.TextField()  # "\u2014 <name> <base64(key id || time || signature)>\n"
    received_at = models.DateTimeField()

    class Meta:
        ordering = ["checkpoint_id", "witness"]
        constraints = [
            models.UniqueConstraint(
                fields=["checkpoint", "witness"], name="audit_cosignature_one_per_witness"
            )
        ]

    def __str__(self) -> str:
        return f"cosignature by {self.witness} on checkpoint {self.checkpoint_id}"


class VerificationRun(models.Model):
    """The outcome of one full verification of the chain (audit_verify)."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    ok = models.BooleanField()
    checked = models.BigIntegerField(default=0)
    checkpoints = models.IntegerField(default=0)
    first_bad_seq = models.BigIntegerField(null=True, blank=True)
    message = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-finished_at"]

    def __str__(self) -> str:
        return f"verification {'ok' if self.ok else 'FAILED'} at {self.finished_at:%Y-%m-%d %H:%M}"
