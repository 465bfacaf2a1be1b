"""Benchmark the audit chain: record -> chain row end to end, and full verification; prints JSON."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import uuid

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection, transaction

from audit import record
from audit.models import ChainEvent
from audit.services import chain_head, relay_publish, signing_key
from audit.verification import verify_chain


def _relay_loop(stop) -> None:
    """The relay as its own process, publishing continuously (as Celery workers would)."""
    connection.close()
    try:
        while not stop.is_set():
            if relay_publish() == 0:
                time.sleep(0.005)
    finally:
        connection.close()


class Command(BaseCommand):
    help = (
        "Record --events audit events (in transactions of --per-tx), relay and chain them with the "
        "real relay and writer (separate processes), then verify the whole chain; prints JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument("--events", type=int, default=100_000)
        parser.add_argument(
            "--per-tx", type=int, default=100, help="events per recording transaction"
        )
        parser.add_argument("--recorders", type=int, default=8, help="concurrent recording threads")
        parser.add_argument("--batch-size", type=int, default=settings.KILN_AUDIT_BATCH_SIZE)
        parser.add_argument("--json", action="store_true", help="print only the JSON result")

    def handle(self, *args, **opts):
        n, per_tx, batch = opts["events"], opts["per_tx"], opts["batch_size"]
        tag = uuid.uuid4().hex[:8]
        stream, group = f"kiln:audit:bench:{tag}", f"bench-{tag}"
        settings.KILN_AUDIT_STREAM, settings.KILN_AUDIT_GROUP = stream, group
        settings.KILN_AUDIT_RELAY_ON_COMMIT = False  # the bench relay publishes continuously
        signing_key()
        env = {
            **os.environ,
            "KILN_AUDIT_STREAM": stream,
            "KILN_AUDIT_GROUP": group,
            "KILN_AUDIT_BATCH_SIZE": str(batch),
            "KILN_AUDIT_SWEEP_SECONDS": "3600",
            "KILN_AUDIT_SIGNING_KEY": settings.KILN_AUDIT_SIGNING_KEY,
            "KILN_TRACING": "0",
        }
        start_seq, _ = chain_head()
        target = start_seq + n
        writer = subprocess.Popen(
            [sys.executable, "manage.py", "audit_writer", "--consumer", f"bench-{tag}"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        stop = multiprocessing.get_context("fork").Event()
        connection.close()  # the relay process must not share this process's connection
        relay = multiprocessing.get_context("fork").Process(
            target=_relay_loop, args=(stop,), name="bench-relay"
        )
        time.sleep(2.0)  # let the writer start and take its lock
        relay.start()
        recorders = max(1, opts["recorders"])

        def recorder(k: int) -> None:
            try:
                mine = range(k, (n + per_tx - 1) // per_tx, recorders)
                for block in mine:
                    with transaction.atomic():
                        for i in range(block * per_tx, min(n, (block + 1) * per_tx)):
                            record(
                                "bench", "audit.bench.recorded", f"bench:{i}", {"i": i, "run": tag}
                            )
            finally:
                connection.close()

        threads = [threading.Thread(target=recorder, args=(k,)) for k in range(recorders)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        recorded = time.perf_counter()
        while chain_head()[0] < target:
            time.sleep(0.01)
        chained = time.perf_counter()
        stop.set()
        relay.join(timeout=30)
        writer.terminate()
        out, _ = writer.communicate(timeout=60)
        stats = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        report = verify_chain()
        total = ChainEvent.objects.count()
        result = {
            "database": connection.vendor,
            "events": n,
            "record_transaction_size": per_tx,
            "recorders": recorders,
            "record_events_per_s": round(n / (recorded - started)),
            "end_to_end_seconds": round(chained - started, 3),
            "end_to_end_events_per_s": round(n / (chained - started)),
            "writer_batch_size": batch,
            "writer_batches": stats.get("batches"),
            "writer_mean_batch": round(stats["appended"] / stats["batches"], 1)
            if stats.get("batches")
            else None,
            "verified_events": report.checked,
            "verify_seconds": round(report.seconds, 3),
            "verify_events_per_s": round(report.checked / report.seconds)
            if report.seconds
            else None,
            "verify_ok": report.ok,
            "load_average_1m": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
            "chain_length": total,
        }
        self.stdout.write(json.dumps(result, indent=None if opts["json"] else 2))
