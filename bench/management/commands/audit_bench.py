"""Benchmark the audit chain: record -> chain row end to end, and full verification; prints JSON."""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import subprocess
import sys
import time
import uuid

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from audit import record
from audit.chain.verification import verify_chain
from audit.chain.writer import LOCK_KEY
from audit.models import ChainEvent
from audit.services import chain_head, relay_publish, signing_key
from bench.waiting import process_gone, wait_until
from kiln import benchjson


def _cpu_seconds(pid: int) -> float | None:
    """User+system CPU seconds of a live process (Linux /proc), to show cost apart from load."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _backend_pid() -> int | None:
    """The PostgreSQL server process of this process's connection (None elsewhere)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _writer_backend_pid() -> int | None:
    """The server process of the audit writer's connection: the one holding its advisory lock."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
            " AND classid = %s AND objid = %s"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [LOCK_KEY >> 32, LOCK_KEY & 0xFFFFFFFF],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def _cpu_delta(pid: int | None, before: float | None) -> float | None:
    after = _cpu_seconds(pid) if pid is not None else None
    return after - before if after is not None and before is not None else None


def _per_event(seconds: float | None, n: int) -> float | None:
    return round(seconds / n * 1e6, 1) if seconds is not None else None


def _recorder(k: int, of: int, n: int, per_tx: int, tag: str, go, results) -> None:
    """One recording process (like one web worker): its share of the events, `per_tx` a transaction.

    Puts its own CPU seconds and its database server process's on `results`.
    """
    connection.close()
    connection.ensure_connection()
    backend = _backend_pid()
    go.wait()
    cpu = time.process_time()
    server = _cpu_seconds(backend) if backend is not None else None
    try:
        for block in range(k, (n + per_tx - 1) // per_tx, of):
            with transaction.atomic():
                for i in range(block * per_tx, min(n, (block + 1) * per_tx)):
                    record("bench", "audit.bench.recorded", f"bench:{i}", {"i": i, "run": tag})
    finally:
        results.put((time.process_time() - cpu, _cpu_delta(backend, server)))
        connection.close()


def _relay_loop(stop, backends) -> None:
    """The relay as its own process, publishing continuously (as Celery workers would)."""
    connection.close()
    try:
        backends.put(_backend_pid())
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
        parser.add_argument(
            "--recorders", type=int, default=4, help="concurrent recording processes"
        )
        parser.add_argument("--batch-size", type=int, default=settings.KILN_AUDIT_BATCH_SIZE)
        parser.add_argument("--json", action="store_true", help="print only the JSON result")
        parser.add_argument(
            "--verify-workers", type=int, default=0, help="1: verify in this process"
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=600.0,
            help="seconds to wait for the events to be recorded and chained before failing",
        )

    def handle(self, *args, **opts):
        n, per_tx, batch = opts["events"], opts["per_tx"], opts["batch_size"]
        started_at = benchjson.now()
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
        relay_backend = multiprocessing.get_context("fork").Queue()
        relay = multiprocessing.get_context("fork").Process(
            target=_relay_loop, args=(stop, relay_backend), name="bench-relay"
        )
        recorders = max(1, opts["recorders"])
        ctx = multiprocessing.get_context("fork")
        go, results = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_recorder, args=(k, recorders, n, per_tx, tag, go, results))
            for k in range(recorders)
        ]
        writer_gone = process_gone(writer, "audit writer")
        try:
            time.sleep(2.0)  # let the writer start and take its lock
            relay.start()
            for proc in procs:
                proc.start()
            time.sleep(1.0)  # all recorders connected and waiting
            writer_backend = None
            for _ in range(300):  # the writer takes its lock once Django has started
                if (
                    writer_backend := _writer_backend_pid()
                ) is not None or writer.poll() is not None:
                    break
                time.sleep(0.1)
            backends = {"relay": relay_backend.get(timeout=30), "writer": writer_backend}
            server_before = {
                stage: _cpu_seconds(pid) if pid is not None else None
                for stage, pid in backends.items()
            }
            started = time.perf_counter()
            deadline = time.monotonic() + opts["timeout"]  # for recording and chaining together
            go.set()
            recorder_cpu, recorder_server = 0.0, 0.0
            for done in range(len(procs)):
                try:
                    client, server = results.get(timeout=max(0.0, deadline - time.monotonic()))
                    recorder_cpu += client
                    recorder_server = (
                        None
                        if server is None or recorder_server is None
                        else (recorder_server + server)
                    )
                except queue.Empty as exc:
                    raise CommandError(
                        f"{len(procs) - done} of {len(procs)} recorders had not recorded their "
                        f"share of {n} events after {opts['timeout']:g} s (--timeout); giving up"
                    ) from exc
            for proc in procs:
                proc.join()
            recorded = time.perf_counter()
            wait_until(
                lambda: chain_head()[0] >= target,
                timeout=max(0.0, deadline - time.monotonic()),
                stated_timeout=opts["timeout"],
                poll=0.01,
                gone=writer_gone,
                what=lambda: (
                    f"{chain_head()[0] - start_seq} of {n} recorded events reached the chain "
                    f"(stream {stream}); the audit writer did not chain the rest"
                ),
            )
            chained = time.perf_counter()
            relay_cpu, writer_cpu = _cpu_seconds(relay.pid), _cpu_seconds(writer.pid)
            server_cpu = {
                "record": recorder_server,
                **{stage: _cpu_delta(backends[stage], server_before[stage]) for stage in backends},
            }
        finally:
            stop.set()
            for proc in procs:
                if proc.pid is not None:
                    if proc.is_alive():
                        proc.terminate()
                    proc.join(timeout=10)
            if relay.pid is not None:
                relay.join(timeout=30)
            writer.terminate()
            out, _ = writer.communicate(timeout=60)
        stats = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        verify_cpu = time.process_time()
        report = verify_chain(workers=1 if opts["verify_workers"] == 1 else None)
        verify_cpu = time.process_time() - verify_cpu
        total = ChainEvent.objects.count()
        result = {
            "database": connection.vendor,
            "events": n,
            "record_transaction_size": per_tx,
            "recorders": recorders,
            "record_events_per_s": round(n / (recorded - started)),
            "end_to_end_seconds": round(chained - started, 3),
            "end_to_end_events_per_s": round(n / (chained - started)),
            "client_cpu_us_per_event": {
                "record": round(recorder_cpu / n * 1e6, 1),
                "relay": round(relay_cpu / n * 1e6, 1) if relay_cpu is not None else None,
                "writer": round(writer_cpu / n * 1e6, 1) if writer_cpu is not None else None,
            },
            # CPU of the PostgreSQL server process serving each stage's connection, per event.
            "server_cpu_us_per_event": {
                stage: _per_event(seconds, n) for stage, seconds in server_cpu.items()
            },
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
            "verify_client_cpu_us_per_event": round(verify_cpu / report.checked * 1e6, 2)
            if opts["verify_workers"] == 1 and report.checked
            else None,
            "load_average_1m": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
            "chain_length": total,
        }
        result = benchjson.stamped(result, name="audit_bench", date=started_at)
        self.stdout.write(json.dumps(result, indent=None if opts["json"] else 2))
