"""Relaying: publishing committed outbox rows to the audit topic (the relay task and sweeps)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from audit import chain
from audit.chain.topic import get_topic
from audit.models import OutboxEvent

RELAY_BATCH = 1000
# The relays' PostgreSQL advisory lock ("kilnrela"): one relay publishes at a time.
RELAY_LOCK_KEY = 0x6B696C6E72656C61


def relay_publish(*, max_events: int | None = None, republish_all: bool = False) -> int:
    """Publish pending outbox rows to the audit topic; returns how many were published.

    A row is pending until published, and published rows are published again
    after KILN_AUDIT_REPUBLISH_SECONDS if still not chained (the writer deletes
    rows it chained), so a stream lost with Redis loses nothing. Raises
    TopicUnavailable when Redis is down; the rows then stay pending. `republish_all`
    publishes every unchained row now (an in-process topic that started empty).
    """
    topic = get_topic()
    total = 0
    # Fixed for the whole call, so rows published by this call are never picked up again by it.
    cutoff = timezone.now() - timedelta(
        seconds=0 if republish_all else settings.KILN_AUDIT_REPUBLISH_SECONDS
    )
    while max_events is None or total < max_events:
        limit = RELAY_BATCH if max_events is None else min(RELAY_BATCH, max_events - total)
        now = timezone.now()
        with transaction.atomic():
            _one_relay_at_a_time()
            rows = _pending_outbox(cutoff, limit)
            if not rows:
                break
            topic.publish(_payloads(rows))
            _mark_published([row[0] for row in rows], now)
        total += len(rows)
        if len(rows) < limit:
            break
    return total


def _one_relay_at_a_time() -> None:
    """Wait until no other relay is publishing (until this transaction ends).

    Two relays at once each took the pending rows the other had not locked and published them
    in whichever order their stream writes landed, so the chain could hold an environment's
    READY before the PROVISIONING that preceded it (the load test's web-restart run found
    three such environments). One at a time, each publishes in outbox order what the one
    before left, and the stream keeps the order in which each object's events committed (a
    later change of the same object commits after the earlier one: its row is locked).
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [RELAY_LOCK_KEY])


def _pending_outbox(cutoff: datetime, limit: int) -> list[tuple]:
    """Rows to publish, oldest first, locked (SKIP LOCKED: rows the writer is deleting are
    already chained; SQLite has one writer at a time anyway)."""
    return list(
        OutboxEvent.objects.select_for_update(skip_locked=True)
        .filter(Q(published_at__isnull=True) | Q(published_at__lt=cutoff))
        .order_by("id")
        .values_list(
            "id", "event_id", "recorded_at", "actor", "action", "target", "data_jcs", "trace_id"
        )[:limit]
    )


def _mark_published(ids: list[int], now: datetime) -> None:
    """Set the rows' published_at: one int[] parameter on PostgreSQL, for the same reason as the
    writer's event id lookups (`audit.services.appending`): a placeholder per id costs more."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE audit_outboxevent SET published_at = %s WHERE id = ANY(%s)", [now, ids]
            )
        return
    OutboxEvent.objects.filter(id__in=ids).update(published_at=now)


def _payloads(rows: list[tuple]) -> list[bytes]:
    """The rows as stream entries: each event's fields as the chain hashes them."""
    # Rows recorded before `data_jcs` existed carry only `data`: canonicalise it here.
    legacy = [row[0] for row in rows if not row[6]]
    stored = (
        dict(OutboxEvent.objects.filter(id__in=legacy).values_list("id", "data")) if legacy else {}
    )
    return [
        json.dumps(
            {
                "event_id": str(event_id),
                "recorded_at": chain.format_time(recorded_at),
                "actor": actor,
                "action": action,
                "target": target,
                "data": data_jcs or chain.canonical_data(stored[id_]),
                "trace_id": trace_id,
            },
            ensure_ascii=False,
        ).encode("utf-8")
        for id_, event_id, recorded_at, actor, action, target, data_jcs, trace_id in rows
    ]
