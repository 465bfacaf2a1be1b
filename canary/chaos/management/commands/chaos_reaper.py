"""`python manage.py chaos_reaper`: a separate process reverting every fault whose lease lapsed."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from canary.chaos.reaper import chaos_reap


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
        stop = threading.Event()
        previous = {}
        if not options["once"]:  # a long-running process stops between passes on SIGTERM
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: stop.set())
        try:
            self._loop(options, period, stop)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _loop(self, options, period: float, stop: threading.Event) -> None:
        ready = options["ready_file"]
        next_tick = time.monotonic()
        while True:
            close_old_connections()
            result = chaos_reap(dry_run=options["dry_run"])
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
