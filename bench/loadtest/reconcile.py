"""After a load run: nothing lost, nothing twice, every state change audited once, one trace per
request, the chain verifies, no task stuck and no lease held.

`reconcile` compares what the clients saw (the locustfile's records) with the database once the
work they started has settled.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime
from typing import Any

from django.db import OperationalError, connection

from audit.chain.verification import verify_chain
from audit.models import ChainEvent, OutboxEvent
from bench.portal.harness import queue_length
from canary.chaos.models import ChaosLease
from kiln.celery import app
from portal.lifecycle import Status
from portal.models import Environment

IN_FLIGHT = (Status.APPROVED, Status.PROVISIONING, Status.EXPIRING, Status.TEARING_DOWN)


def wait_settled(*, team: str, timeout: float) -> float:
    """Wait until no environment of the team is in flight, the task queue is empty and the
    outbox is drained (every event chained); returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            busy = Environment.objects.filter(team__slug=team, status__in=IN_FLIGHT).exists()
            if not (busy or OutboxEvent.objects.exists() or queue_length() or unacked_tasks()):
                break
        except OperationalError:  # the database restarted under a fault run: connect again
            connection.close()
        time.sleep(0.5)
    return round(time.monotonic() - started, 2)


def _transitions(env_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The chain's events per environment (by public id), in chain order."""
    events: dict[str, list[dict[str, Any]]] = {e: [] for e in env_ids}
    targets = [f"portal.environment:{e}" for e in env_ids]
    for target, action, data, trace_id in (
        ChainEvent.objects.filter(target__in=targets)
        .order_by("seq")
        .values_list("target", "action", "data", "trace_id")
    ):
        events[target.split(":", 1)[1]].append(
            {"action": action, "data": data, "trace_id": trace_id}
        )
    return events


def _audit_check(env: Environment, events: list[dict[str, Any]]) -> tuple[int, int]:
    """(missing, twice) state changes of one environment: the chain's moves (from, to) must walk
    from SUBMITTED to its status, each move once."""
    moves = []
    for event in events:
        data = json.loads(event["data"]) if isinstance(event["data"], str) else event["data"]
        if event["action"] == "portal.environment.submitted":
            moves.append((None, "SUBMITTED"))
        elif isinstance(data, dict) and "from" in data and "to" in data:
            moves.append((data["from"], data["to"]))
    twice = sum(n - 1 for n in Counter(moves).values() if n > 1)
    at, missing = None, 0
    walked = dict.fromkeys(m for m in moves)
    # Follow the walk from submission; a move that does not start where the last one ended
    # means one in between is missing.
    for frm, to in walked:
        if frm != at:
            missing += 1
        at = to
    if at != env.status:
        missing += 1
    return missing, twice


def _broken_trace(record: dict[str, Any], events: list[dict[str, Any]]) -> bool:
    """True when an event from submission up to READY (in chain order) does not carry the
    request's trace; what follows READY (the teardown) is another request's."""
    for event in events:
        if event["trace_id"] != record["trace_id"]:
            return True
        data = json.loads(event["data"]) if isinstance(event["data"], str) else event["data"]
        if isinstance(data, dict) and data.get("to") == "READY":
            return False
    return False


def reconcile(
    *, team: str, run: str, since: datetime, records: list[dict[str, Any]]
) -> dict[str, Any]:
    """Compare the clients' records with the database; every count but `checked` must be 0."""
    in_db = {
        e.public_id: e for e in Environment.objects.filter(team__slug=team, name__startswith=run)
    }
    acknowledged = {r["id"]: r for r in records if r.get("id")}
    names = Counter(e.name for e in in_db.values())
    unacknowledged = [
        r["name"] for r in records if not r.get("id") and names.get(r["name"])
    ]  # created, but the client never heard back
    events = _transitions(list(in_db))
    missing = twice = broken = 0
    for public_id, env in in_db.items():
        m, t = _audit_check(env, events[public_id])
        missing, twice = missing + m, twice + t
        record = acknowledged.get(public_id)
        if record is not None and _broken_trace(record, events[public_id]):
            broken += 1
    statuses = Counter(e.status for e in in_db.values())
    report = {
        "environments_acknowledged": len(acknowledged),
        "environments_in_database": len(in_db),
        "statuses": dict(statuses),
        "lost": len([i for i in acknowledged if i not in in_db]),
        "duplicated": sum(n - 1 for n in names.values() if n > 1),
        "created_unacknowledged": len(unacknowledged),
        "not_ready_or_deleted": sum(
            n for s, n in statuses.items() if s not in ("READY", "DELETED")
        ),
        "malformed_created": Environment.objects.filter(team__slug=team, created_at__gte=since)
        .exclude(name__startswith=run)
        .count(),
        "state_changes_unaudited": missing,
        "state_changes_audited_twice": twice,
        "outbox_not_chained": OutboxEvent.objects.count(),
        "broken_traces": broken,
        "stuck_tasks": queue_length() + unacked_tasks(),
        "held_leases": ChaosLease.objects.exclude(holder="").count(),
    }
    verified = verify_chain(public_key=None, include_anchors=False)
    report["chain"] = {
        "ok": verified.ok,
        "checked": verified.checked,
        "head_seq": verified.head_seq,
    }
    report["ok"] = verified.ok and all(
        report[k] == 0
        for k in (
            "lost", "duplicated", "not_ready_or_deleted", "malformed_created",
            "state_changes_unaudited", "state_changes_audited_twice", "outbox_not_chained",
            "broken_traces", "stuck_tasks", "held_leases",
        )
    )  # fmt: skip
    return report


def unacked_tasks() -> int:
    """Tasks a worker took but did not acknowledge (kombu's Redis `unacked` hash)."""
    with app.connection_for_write() as conn:
        client = getattr(conn.default_channel, "client", None)
        return int(client.hlen("unacked")) if client is not None else 0


def advisory_locks_held() -> int:
    """Advisory locks held in this database by any session (the audit writer's, after the run
    has stopped every process, must be gone)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND d.datname = current_database() AND l.granted"
        )
        return int(cursor.fetchone()[0])
