"""Benchmark Kiln's sequential canary analysis against a Kayenta-style and a threshold judge; prints JSON."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys

from django.core.management.base import BaseCommand, CommandError

from bench.canary import bench_classes, run_bench


class Command(BaseCommand):
    help = (
        "Simulated rollouts per traffic class, healthy and regressed, three judges on the same "
        "streams; constants tuned on the 'tune' seeds, the table on the 'report' seeds."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rollouts", type=int, default=500, help="per class, report seeds")
        parser.add_argument("--tune-rollouts", type=int, default=200, help="per class, tune seeds")
        parser.add_argument("--seeds", choices=["tune", "report", "both"], default="both")
        parser.add_argument("--classes", nargs="*", choices=sorted(bench_classes()), default=None)
        parser.add_argument(
            "--workers", type=int, default=2, help="processes the classes are spread over"
        )
        parser.add_argument("--json", action="store_true", help="print the JSON report (default)")

    def handle(self, *args, **options) -> None:
        if options["rollouts"] < 1 or options["tune_rollouts"] < 1:
            raise CommandError("--rollouts and --tune-rollouts must be at least 1")
        started = datetime.datetime.now(datetime.UTC)
        load_before = os.getloadavg()
        report = run_bench(
            rollouts=options["rollouts"],
            tune_rollouts=options["tune_rollouts"],
            seeds=options["seeds"],
            classes=options["classes"],
            workers=options["workers"],
        )
        uname = platform.uname()
        report = {
            "command": " ".join(["python manage.py canary_bench", *sys.argv[2:]]),
            "date": started.isoformat(timespec="seconds"),
            "machine": {
                "uname": f"{uname.system} {uname.release} {uname.machine}",
                "nproc": os.cpu_count(),
                "python": platform.python_version(),
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "note": "2 cores shared with other work",
            },
            **report,
        }
        self.stdout.write(json.dumps(report, indent=2))
