"""The single audit writer: consume the topic, append to the chain in batches, sign checkpoints.

One writer at a time: on PostgreSQL it holds a session advisory lock, so a
second writer waits (and takes over when the first dies); in standalone mode a
process-wide lock does the same. Entries are acknowledged only after the batch
committed; a crash before that redelivers them, and redelivered event ids are
skipped, so a restart leaves no gap and no duplicate.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from audit import services
from audit.chain.topic import Topic, TopicUnavailable, get_topic
from audit.services.tree import CheckpointRefused

log = logging.getLogger("kiln.audit.writer")

LOCK_KEY = 0x6B696C6E61756469  # "kilnaudi": the writer's PostgreSQL advisory lock
_local_lock = threading.Lock()


@dataclass
class WriterStats:
    """Counters of one writer run."""

    appended: int = 0
    duplicates: int = 0
    malformed: int = 0
    batches: int = 0
    checkpoints: int = 0


class AuditWriter:
    """Consumes the audit topic and is the only writer of the chain."""

    def __init__(
        self,
        *,
        topic: Topic | None = None,
        consumer: str | None = None,
        batch_size: int | None = None,
        block_ms: int = 1000,
        checkpoint_every: int | None = None,
        checkpoint_seconds: float | None = None,
        sweep_seconds: float | None = None,
        batch_pause: float = 0.0,
        lock_wait_log_seconds: float = 5.0,
    ) -> None:
        self.topic = topic or get_topic()
        self.consumer = consumer or settings.KILN_AUDIT_CONSUMER
        self.batch_size = batch_size or settings.KILN_AUDIT_BATCH_SIZE
        self.block_ms = block_ms
        self.checkpoint_every = checkpoint_every or settings.KILN_AUDIT_CHECKPOINT_EVERY
        self.checkpoint_seconds = checkpoint_seconds or settings.KILN_AUDIT_CHECKPOINT_SECONDS
        self.sweep_seconds = sweep_seconds or settings.KILN_AUDIT_SWEEP_SECONDS
        self.batch_pause = batch_pause
        self.lock_wait_log_seconds = lock_wait_log_seconds
        self.stats = WriterStats()
        self.role: str | None = None
        self._since_checkpoint = 0
        self._needs_checkpoint = True  # at start the head may be uncovered (a crash before signing)
        self._last_checkpoint = time.monotonic()
        self._last_sweep = 0.0

    # --- locking ------------------------------------------------------------------------

    def _acquire(self, stop: threading.Event | None) -> bool:
        if connection.vendor != "postgresql":
            while not _local_lock.acquire(timeout=0.5):
                if stop is not None and stop.is_set():
                    return False
            return True
        waited = 0.0
        with connection.cursor() as cursor:
            while True:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
                if cursor.fetchone()[0]:
                    break
                if stop is not None and stop.is_set():
                    return False
                if waited == 0.0 or waited >= self.lock_wait_log_seconds:
                    log.info("another audit writer holds the lock; waiting")
                    waited = 0.0
                time.sleep(0.2)
                waited += 0.2
        self.role = self._usable_role()
        return True

    def _release(self) -> None:
        if connection.vendor != "postgresql":
            _local_lock.release()
            return
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
        except DatabaseError:
            pass  # the connection is gone, and the lock with it

    def _usable_role(self) -> str | None:
        """The writer role, when it exists and may insert here (after audit_setup_roles)."""
        role = settings.KILN_AUDIT_WRITER_ROLE
        if not role:
            return None
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) "
                "AND pg_has_role(current_user, (SELECT oid FROM pg_roles WHERE rolname = %s), 'MEMBER')"
                " AND has_table_privilege((SELECT oid FROM pg_roles WHERE rolname = %s), 'audit_chainevent', 'INSERT')"
                " AND has_table_privilege((SELECT oid FROM pg_roles WHERE rolname = %s), 'audit_outboxevent', 'DELETE')",
                [role, role, role, role],
            )
            return role if cursor.fetchone()[0] else None

    # --- one step -----------------------------------------------------------------------

    def _append(self, messages) -> None:
        if self.batch_pause:
            # Fault drills: widen the window in which a killed writer has an uncommitted batch.
            with transaction.atomic():
                result = services.chain_append(messages=messages, role=self.role)
                time.sleep(self.batch_pause)
        else:
            result = services.chain_append(messages=messages, role=self.role)
        self.topic.ack([entry_id for entry_id, _ in messages])
        self.stats.batches += 1
        self.stats.appended += result.appended
        self.stats.duplicates += result.duplicates
        self.stats.malformed += result.malformed
        self._since_checkpoint += result.appended
        self._needs_checkpoint = self._needs_checkpoint or result.appended > 0
        if self._since_checkpoint >= self.checkpoint_every or (
            self._since_checkpoint
            and time.monotonic() - self._last_checkpoint >= self.checkpoint_seconds
        ):
            self._checkpoint()

    def _checkpoint(self) -> None:
        try:
            if services.checkpoint_create() is not None:
                self.stats.checkpoints += 1
        except CheckpointRefused as exc:
            # The tiles do not extend the last signed tree: sign nothing, keep chaining (the
            # chain stays verifiable) and say so; `audit_verify` names the damaged entries.
            log.error("audit checkpoint refused: %s", exc)
        self._since_checkpoint = 0
        self._needs_checkpoint = False
        self._last_checkpoint = time.monotonic()

    def _sweep(self, force: bool = False) -> None:
        if force or time.monotonic() - self._last_sweep >= self.sweep_seconds:
            self._last_sweep = time.monotonic()
            services.relay_publish()

    def drain_pending(self) -> None:
        """Take over and chain every delivered-but-unacknowledged entry (after a crash)."""
        self.topic.claim_all(self.consumer)
        while True:
            messages = self.topic.read(self.consumer, self.batch_size, 0, pending=True)
            if not messages:
                return
            self._append(messages)

    # --- loops --------------------------------------------------------------------------

    def run_once(self) -> WriterStats:
        """Publish the outbox, chain everything pending in the topic, sign a checkpoint, return."""
        if not self._acquire(None):
            return self.stats
        try:
            self._sweep(force=True)
            self.drain_pending()
            while True:
                messages = self.topic.read(self.consumer, self.batch_size, 0, pending=False)
                if not messages:
                    break
                self._append(messages)
            self._checkpoint()
        finally:
            self._release()
        return self.stats

    def run(self, stop: threading.Event) -> WriterStats:
        """Run until `stop` is set: chain as entries arrive, checkpoint every N/T and when idle."""
        if not self._acquire(stop):
            return self.stats
        log.info("audit writer %s (pid %s) holds the lock", self.consumer, os.getpid())
        try:
            recovered = False
            while not stop.is_set():
                try:
                    if not recovered:
                        self.drain_pending()
                        recovered = True
                    self._sweep()
                    messages = self.topic.read(
                        self.consumer, self.batch_size, self.block_ms, pending=False
                    )
                    if messages:
                        self._append(messages)
                    elif self._needs_checkpoint:
                        self._checkpoint()  # idle: cover the head now
                except TopicUnavailable as exc:
                    log.warning("audit topic unavailable (%s); retrying", exc)
                    recovered = False
                    stop.wait(1.0)
                except DatabaseError:
                    log.exception("audit writer database error; reconnecting")
                    self._release()
                    connection.close()
                    stop.wait(1.0)
                    if not self._acquire(stop):
                        break
                    recovered = False
        finally:
            self._release()
            connection.close()
        return self.stats
