"""`python manage.py chaos_lever_bench --json`: engage the platform lever over 50 running
experiments and time the last fault reverted and confirmed, with live and killed controllers.

See bench/chaos/levers.py for what is measured. Runs alternate the two modes, so both see
the same load on a shared machine.
"""

from __future__ import annotations

import json
import os
import time

from django.core.management.base import BaseCommand, CommandError

from bench.chaos import levers
from bench.chaos.harness import bench_timings, reaper_running
from kiln.cluster.backends import get_backend


class Command(BaseCommand):
    help = "Time the platform safety lever: engage to the last fault reverted and read back."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--experiments", type=int, default=50)
        parser.add_argument("--teams", type=int, default=5)
        parser.add_argument("--runs", type=int, default=5, help="runs of each mode")
        parser.add_argument("--lease", type=float, default=10.0, help="lease duration (s)")
        parser.add_argument("--reaper-period", type=float, default=0.5)
        parser.add_argument(
            "--timeout",
            type=float,
            default=300.0,
            help="for every fault to be injected, then reverted",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **opts) -> None:
        if opts["experiments"] < 1 or opts["teams"] < 1 or opts["runs"] < 1:
            raise CommandError("--experiments, --teams and --runs must be at least 1")
        timings = bench_timings(opts["lease"])
        backend = get_backend()
        results: list[levers.RunResult] = []
        started = time.monotonic()
        load_start = os.getloadavg()[0]
        with reaper_running(lease=opts["lease"], reaper_period=opts["reaper_period"]):
            for _ in range(opts["runs"]):
                for mode in levers.MODES:
                    result = levers.run_once(
                        mode,
                        backend=backend,
                        teams=opts["teams"],
                        experiments=opts["experiments"],
                        timeout=opts["timeout"],
                    )
                    results.append(result)
                    if not opts["json"]:
                        self.stdout.write(
                            f"{mode}: {result.confirmed}/{result.injected} confirmed, "
                            f"last {result.last_s} s"
                        )
        report = levers.summarize(results, lease=opts["lease"], reaper_period=opts["reaper_period"])
        report.update(
            {
                "teams": opts["teams"],
                "runs_per_mode": opts["runs"],
                "lease_duration_s": opts["lease"],
                "retry_period_s": timings["KILN_CHAOS_RETRY_PERIOD"],
                "reaper_period_s": opts["reaper_period"],
                "backend": backend.name,
                "experiments_left_running": levers.experiments_left(),
                "wall_seconds": round(time.monotonic() - started, 1),
                "load_average_1m_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)],
                "cpus": os.cpu_count(),
                "choices": "lease, reaper period and run counts were set before the first run "
                "and not tuned on its figures",
            }
        )
        self.stdout.write(json.dumps(report, indent=None if opts["json"] else 2))
