"""Measure the audit spine's kept optimisations against their plain alternatives; prints JSON.

Each figure is the client CPU (and wall) time per event or entry, the minimum of three
rounds; the docstrings of `chain.entry_bytes`, the outbox row (`audit.services.recording`,
`record()` with its rows written every 100 events and after every event) and the chain COPY (`audit.services.appending`) cite them.
Database rounds run in transactions that are rolled back: nothing is kept.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import rfc8785
from django.core.management.base import BaseCommand
from django.db import connection, transaction
from opentelemetry.instrumentation.utils import suppress_instrumentation

from audit import chain
from audit.models import ChainEvent, OutboxEvent
from audit.services import chain_head
from audit.services.appending import insert_entries
from audit.services.recording import INSERT_OUTBOX, outbox_values, record
from kiln import benchjson

EVENT = ("3f1c2a9e-0000-4000-8000-00000000abcd", "2026-11-30T06:00:00.123456Z", "bench",
         "audit.bench.recorded", "bench:12345", '{"i":12345,"run":"abcdef12"}', "")  # fmt: skip


def _per_item(run: Callable[[], None], n: int, rounds: int = 3) -> dict[str, float]:
    """Minimum over `rounds` of CPU and wall microseconds per item of `run` (which does `n`)."""
    best_cpu = best_wall = float("inf")
    for _ in range(rounds):
        cpu, wall = time.process_time(), time.perf_counter()
        run()
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return {"cpu_us": round(best_cpu / n * 1e6, 2), "wall_us": round(best_wall / n * 1e6, 2)}


def _rolled_back(body: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        with transaction.atomic():
            body()
            transaction.set_rollback(True)

    return run


def _entry_rfc8785() -> bytes:
    event_id, recorded_at, actor, action, target, data, trace_id = EVENT
    entry = {"action": action, "actor": actor, "data": json.loads(data), "event_id": event_id,
             "recorded_at": recorded_at, "seq": 7, "target": target, "trace_id": trace_id}  # fmt: skip
    return rfc8785.dumps(entry)


class Command(BaseCommand):
    help = "Time the kept audit optimisations against their plain alternatives; prints JSON."

    def add_arguments(self, parser):
        parser.add_argument("--events", type=int, default=2000, help="rows per database round")
        parser.add_argument("--pure", type=int, default=20_000, help="calls per pure round")

    def handle(self, *args, **opts):
        n, pure = opts["events"], opts["pure"]
        started_at = benchjson.now()
        prev = "ab" * 32
        result: dict = {"database": connection.vendor, "events_per_round": n}
        result["entry_hash"] = {
            "entry_bytes": _per_item(
                lambda: [chain.entry_hash(prev, chain.entry_bytes(7, *EVENT)) for _ in range(pure)], pure
            ),
            "rfc8785_of_the_parsed_entry": _per_item(
                lambda: [chain.entry_hash(prev, _entry_rfc8785()) for _ in range(pure // 10)], pure // 10
            ),
        }  # fmt: skip

        def values(i: int) -> tuple:
            return (uuid.uuid4(), datetime.now(UTC), "bench", "audit.bench.recorded", f"bench:{i}",
                    '{"i":1}', '{"i":1}', "")  # fmt: skip

        def orm_create() -> None:
            for i in range(n):
                OutboxEvent.objects.create(recorded_at=datetime.now(UTC), actor="bench",
                                           action="audit.bench.recorded", target=f"bench:{i}",
                                           data={"i": 1}, data_jcs='{"i":1}')  # fmt: skip

        def cursor_insert(traced: bool) -> Callable[[], None]:
            def run() -> None:
                for i in range(n):
                    if traced:
                        with connection.cursor() as cursor:
                            cursor.execute(INSERT_OUTBOX, outbox_values(values(i)))
                    else:
                        with suppress_instrumentation(), connection.cursor() as cursor:
                            cursor.execute(INSERT_OUTBOX, outbox_values(values(i)))

            return run

        def record_flushed_every(size: int) -> Callable[[], None]:
            """record() n times, the deferred rows written every `size` events (on PostgreSQL
            Kiln's engine writes them at the transaction's next statement or commit)."""
            flush = getattr(connection, "flush_deferred", lambda: None)

            def run() -> None:
                for i in range(n):
                    record("bench", "audit.bench.recorded", f"bench:{i}", {"i": 1})
                    if (i + 1) % size == 0:
                        flush()
                flush()

            return run

        result["outbox_insert"] = {
            "record_rows_written_every_100": _per_item(_rolled_back(record_flushed_every(100)), n),
            "record_rows_written_every_event": _per_item(_rolled_back(record_flushed_every(1)), n),
            "orm_create": _per_item(_rolled_back(orm_create), n),
            "cursor_insert_traced": _per_item(_rolled_back(cursor_insert(True)), n),
            "cursor_insert_untraced": _per_item(_rolled_back(cursor_insert(False)), n),
        }

        def entries() -> list[chain.Entry]:
            head_seq, head_hash = chain_head()
            events = [(str(uuid.uuid4()), *EVENT[1:4], f"bench:{i}", *EVENT[5:]) for i in range(n)]
            return list(chain.build_entries(head_seq, head_hash, events))

        columns = ", ".join(chain.ROW_COLUMNS)
        sql = f"INSERT INTO audit_chainevent ({columns}) VALUES ({', '.join(['%s'] * 10)})"  # noqa: S608

        def executemany() -> None:
            with connection.cursor() as cursor:
                cursor.executemany(sql, [e.as_row() for e in entries()])

        def bulk_create() -> None:
            ChainEvent.objects.bulk_create(
                [ChainEvent(seq=e.seq, event_id=uuid.UUID(e.event_id),
                            recorded_at=datetime.fromisoformat(e.recorded_at), actor=e.actor,
                            action=e.action, target=e.target, data=e.data, trace_id=e.trace_id,
                            prev_hash=e.prev_hash, hash=e.hash) for e in entries()],
                batch_size=1000,
            )  # fmt: skip

        result["chain_insert_with_building"] = {
            "copy_or_bulk": _per_item(_rolled_back(lambda: insert_entries(entries=entries())), n),
            "executemany": _per_item(_rolled_back(executemany), n),
            "bulk_create": _per_item(_rolled_back(bulk_create), n),
        }
        result = benchjson.stamped(result, name="audit_choices_bench", date=started_at)
        self.stdout.write(json.dumps(result))
