"""Run the single audit writer (production: its own process)."""

from __future__ import annotations

import json
import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from audit.chain.metrics import LagWatch
from audit.chain.topic import TopicUnavailable, get_topic
from audit.chain.writer import AuditWriter
from kiln import health, metrics_server


class Command(BaseCommand):
    help = "Consume the audit topic and append to the hash chain; --once drains and exits."

    def add_arguments(self, parser):
        parser.add_argument(
            "--once", action="store_true", help="drain what is pending, checkpoint, exit"
        )
        parser.add_argument("--batch-size", type=int, default=None)
        parser.add_argument("--consumer", default=None, help="consumer name in the group")
        parser.add_argument(
            "--batch-pause",
            type=float,
            default=0.0,
            help="seconds to hold each batch's transaction open before commit (fault drills)",
        )

    def handle(self, *args, **opts):
        writer = AuditWriter(
            consumer=opts["consumer"],
            batch_size=opts["batch_size"],
            batch_pause=opts["batch_pause"],
        )
        if opts["once"]:
            try:
                stats = writer.run_once()
            except TopicUnavailable as exc:
                raise CommandError(f"audit topic unavailable: {exc}") from exc
            self.stdout.write(json.dumps(stats.__dict__))
            return
        # /metrics and probes on KILN_METRICS_PORT (9103 in deploy/): ready while the database
        # and the stream answer, live unless the lag keeps growing past its bound.
        metrics_server.start_from_env(
            "audit-writer",
            live={"lag": LagWatch().check},
            ready={"database": health.database, "stream": _stream_check},
        )
        stop = threading.Event()
        previous = {
            sig: signal.signal(sig, lambda *_: stop.set())
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            self.stdout.write("audit writer running (Ctrl-C stops it)")
            stats = writer.run(stop)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.stdout.write(json.dumps(stats.__dict__))


def _stream_check() -> dict:
    """The audit stream answers: its backlog (published, not yet acknowledged)."""
    return {"ok": True, "pending": get_topic().backlog()}
