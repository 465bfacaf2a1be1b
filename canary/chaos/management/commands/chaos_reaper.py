"""`python manage.py chaos_reaper`: a separate process reverting every fault whose lease lapsed.

With KILN_METRICS_PORT (9105 in deploy/) it serves /metrics and probes: ready after its first
pass, live while its passes keep coming (the last one ended less than LIVE_PERIODS periods ago).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections
from prometheus_client import Gauge

from canary.chaos.reaper import chaos_reap
from kiln import health, metrics_server

LIVE_PERIODS = 3  # passes missed before the process is restarted
LAST_PASS = Gauge(
    "kiln_chaos_reaper_last_pass_timestamp_seconds",
    "When the chaos reaper process last finished a pass (Unix seconds)",
)


class PassWatch:
    """When the reaper last finished a pass, as its readiness and liveness checks read it."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.last: float | None = None  # time.monotonic() of the last pass
        self.started = time.monotonic()

    def passed(self) -> None:
        """Record a finished pass."""
        self.last = time.monotonic()
        LAST_PASS.set_to_current_time()

    def ready(self) -> dict:
        """Ready once the first pass finished."""
        return {"ok": self.last is not None, "passes": "started" if self.last else "none yet"}

    def live(self) -> dict:
        """Live while the last pass (or the start) is less than LIVE_PERIODS periods old."""
        age = time.monotonic() - (self.last if self.last is not None else self.started)
        bound = LIVE_PERIODS * self.period + 30.0  # a slow first pass is not a hung one
        return {"ok": age <= bound, "seconds_since_pass": round(age, 3), "bound_seconds": bound}


class Command(BaseCommand):
    help = "Revert faults whose lease lapsed, every --period seconds (default KILN_CHAOS_REAPER_PERIOD)."
    requires_system_checks: list = []  # a runtime process: start fast, checks belong to deploys

    def add_arguments(self, parser) -> None:
        parser.add_argument("--period", type=float, default=None, help="seconds between passes")
        parser.add_argument("--once", action="store_true", help="one pass, then exit")
        parser.add_argument("--dry-run", action="store_true", help="report what would be reverted")
        parser.add_argument("--ready-file", default="", help="touch this file after the first pass")

    def handle(self, *args, **options) -> None:
        period = options["period"] or settings.KILN_CHAOS_REAPER_PERIOD
        watch = PassWatch(period)
        if not options["once"]:
            metrics_server.start_from_env(
                "chaos-reaper",
                live={"passes": watch.live},
                ready={"database": health.database, "first_pass": watch.ready},
            )
        stop = threading.Event()
        previous = {}
        if not options["once"]:  # a long-running process stops between passes on SIGTERM
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: stop.set())
        try:
            self._loop(options, period, stop, watch)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _loop(self, options, period: float, stop: threading.Event, watch: PassWatch) -> None:
        ready = options["ready_file"]
        next_tick = time.monotonic()
        while True:
            close_old_connections()
            result = chaos_reap(dry_run=options["dry_run"])
            watch.passed()
            if ready:
                Path(ready).touch()
                ready = ""
            if options["once"] or result.reverted or result.strays or result.ended:
                self.stdout.write(json.dumps(result.as_dict()))
                self.stdout.flush()
            if options["once"]:
                return
            # Fixed ticks (no drift from the pass's own run time): the period bounds every gap.
            next_tick = max(next_tick + period, time.monotonic())
            if stop.wait(max(0.0, next_tick - time.monotonic())):
                return
