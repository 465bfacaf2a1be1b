"""The canary benchmark through a real Prometheus (classic buckets and native histograms); prints JSON."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys

from django.core.management.base import BaseCommand, CommandError

from bench.canary import bench_classes
from bench.canary.prometheus_bench import NATIVE_SCHEMA, run
from bench.canary.prometheus_server import prometheus_available
from bench.canary.streams import SEED_SETS

TARGETS = {"false_rollback": 0.01, "regression_promoted": 0.05}


class Command(BaseCommand):
    help = (
        "Rollouts of every benchmark traffic class end to end through Debian's Prometheus "
        "(Istio traffic source -> scrape -> PromQL -> analyzer), with Istio's default buckets "
        "and with native histograms, beside the exact-count figures; report seeds."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--rollouts", type=int, default=20, help="healthy and as many regressed, per class"
        )
        parser.add_argument("--classes", nargs="*", choices=sorted(bench_classes()), default=None)
        parser.add_argument("--scrape-seconds", type=float, default=5.0)
        parser.add_argument("--json", action="store_true", help="print the JSON report (default)")

    def handle(self, *args, **options) -> None:
        if options["rollouts"] < 1:
            raise CommandError("--rollouts must be at least 1")
        if not 0.5 <= options["scrape_seconds"] <= 60:
            raise CommandError("--scrape-seconds must be between 0.5 and 60")
        if not prometheus_available():
            raise CommandError("Debian's prometheus package is missing (make prometheus-tools)")
        classes = bench_classes()
        if options["classes"]:
            classes = {name: classes[name] for name in options["classes"]}
        started = datetime.datetime.now(datetime.UTC)
        load_before = os.getloadavg()
        result = run(
            classes,
            rollouts=options["rollouts"],
            scrape_seconds=options["scrape_seconds"],
            log=lambda line: self.stderr.write(line),
        )
        per_class = result["classes"]
        targets = {}
        for kind in ("exact", "classic", "native"):
            rows = {name: c[kind] for name, c in per_class.items()}
            targets[kind] = {
                # Where the buckets resolve the design ratios the exact-count bounds must hold;
                # where they do not, no regression may be promoted at all.
                "bounds_hold_where_resolved": all(
                    (r["false_rollback"] or 0) <= TARGETS["false_rollback"]
                    and (r["regression_promoted"] or 0) <= TARGETS["regression_promoted"]
                    for r in rows.values()
                    if r.get("resolved", True)
                ),
                "nothing_promoted_where_unresolved": all(
                    (r["regression_promoted"] or 0) == 0 and (r["healthy_promoted"] or 0) == 0
                    for r in rows.values()
                    if not r.get("resolved", True)
                ),
            }
        uname = platform.uname()
        report = {
            "command": " ".join(["python manage.py canary_prometheus_bench", *sys.argv[2:]]),
            "date": started.isoformat(timespec="seconds"),
            "machine": {
                "uname": f"{uname.system} {uname.release} {uname.machine}",
                "nproc": os.cpu_count(),
                "python": platform.python_version(),
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "note": "2 cores shared with other work",
            },
            "seeds": {
                "reported": f"report ({SEED_SETS['report']} + class index)",
                "constants": "the engine's defaults, chosen by canary_bench on the 'tune' seeds "
                f"({SEED_SETS['tune']}); nothing is tuned here",
            },
            "histograms": {
                "classic": "Istio's default buckets (0.5, 1, 5, 10, 25, 50, 100, 250, 500, ... ms)",
                "native": f"native (exponential) histograms of schema {NATIVE_SCHEMA}",
            },
            "targets": {**TARGETS, "met": targets},
            **result,
        }
        self.stdout.write(json.dumps(report, indent=2))
