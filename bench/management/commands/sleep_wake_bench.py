"""`python manage.py sleep_wake_bench --json`: wake and sleep times on the simulated cluster with its
realistic delays, per environment shape, and whether every wake restored exactly what sleeping
changed (bench/portal/sleep_wake.py). Development only."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from bench.portal.sleep_wake import sleep_wake_bench
from kiln import benchjson


class Command(BaseCommand):
    help = "Wake and sleep times on the simulated cluster (realistic delays), per shape."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rounds", type=int, default=5, help="sleep-all, wake-all rounds")
        parser.add_argument("--per-shape", type=int, default=2, help="environments of each shape")
        parser.add_argument("--poll", type=float, default=0.5, help="seconds between passes")
        parser.add_argument("--json", action="store_true", help="print the JSON report only")

    def handle(self, *args, **options) -> None:
        if options["rounds"] < 1 or options["per_shape"] < 1 or options["poll"] <= 0:
            raise CommandError("--rounds and --per-shape take 1 or more, --poll a positive number")
        date = benchjson.now()
        report = sleep_wake_bench(
            rounds=options["rounds"], per_shape=options["per_shape"], poll=options["poll"]
        )
        report["seed_use"] = (
            "no seed: the delays are the simulated cluster's fixed realistic profile"
        )
        report = benchjson.stamped(report, name="sleep_wake_bench", date=date)
        if not options["json"]:
            self.stdout.write(
                f"wake median {report['wake_median_s']} s, p95 {report['wake_p95_s']} s; "
                f"restored exactly {report['restored_exactly']}, "
                f"inexactly {report['restored_inexactly']}"
            )
        self.stdout.write(json.dumps(report, indent=2, default=str))
