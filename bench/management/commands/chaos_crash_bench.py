"""`python manage.py chaos_crash_bench --trials 200 --json`: kill controllers holding faults, time the revert.

Each trial kills a controller (a fork of this process, or `manage.py chaos_controller` with
--spawn) with SIGKILL while it holds a fault, and times the independent `manage.py chaos_reaper`
process's revert; see bench/chaos/crash.py. The target is 100% reverted and confirmed, the
worst within lease_duration + reaper_period.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict

from django.core.management.base import BaseCommand, CommandError

from bench.chaos.crash import FAULTS, TrialResult, crash_trial, ensure_target, summarize
from bench.chaos.harness import reaper_running
from kiln.cluster.backends import get_backend


class Command(BaseCommand):
    help = "Kill chaos controllers with SIGKILL while they hold faults; report how fast the reaper reverts."
    requires_system_checks: list = []  # a runtime process: start fast, checks belong to deploys

    def add_arguments(self, parser) -> None:
        parser.add_argument("--trials", type=int, default=50)
        parser.add_argument("--lease", type=float, default=1.0, help="lease duration in seconds")
        parser.add_argument("--reaper-period", type=float, default=0.25)
        parser.add_argument(
            "--spawn", action="store_true", help="`manage.py chaos_controller` children, not forks"
        )
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **opts) -> None:
        if opts["trials"] < 1:
            raise CommandError("--trials must be at least 1")
        rng = random.Random(opts["seed"])
        backend = get_backend()
        results: list[TrialResult] = []
        started = time.monotonic()
        load_start = os.getloadavg()[0]
        ensure_target(backend)
        with reaper_running(lease=opts["lease"], reaper_period=opts["reaper_period"]):
            for i in range(opts["trials"]):
                results.append(
                    crash_trial(
                        FAULTS[i % len(FAULTS)], backend=backend, spawn=opts["spawn"], rng=rng
                    )
                )
                if not opts["json"]:
                    self.stdout.write(json.dumps(asdict(results[-1])))
        summary = summarize(results, lease=opts["lease"], reaper_period=opts["reaper_period"])
        summary["wall_seconds"] = round(time.monotonic() - started, 1)
        # The bound assumes the reaper runs on time; on a shared machine the load says how fair that was.
        summary["load_average_1m_start_end"] = [round(load_start, 2), round(os.getloadavg()[0], 2)]
        summary["cpus"] = os.cpu_count()
        # The seed draws each kill's point in the renew cycle; no constant was tuned on it.
        summary["seed"] = opts["seed"]
        summary["spawned_controllers"] = bool(opts["spawn"])
        self.stdout.write(json.dumps(summary, indent=None if opts["json"] else 2))
