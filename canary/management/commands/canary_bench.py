"""Benchmark Kiln's sequential canary analysis against a fixed-threshold judge; prints JSON."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from canary.bench import run_bench
from canary.simulate import CLASSES


class Command(BaseCommand):
    help = "Simulated rollouts per traffic class, with and without a regression; both judges side by side."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rollouts", type=int, default=1000)
        parser.add_argument("--seed", type=int, default=20260601)
        parser.add_argument("--classes", nargs="*", choices=sorted(CLASSES), default=None)
        parser.add_argument("--json", action="store_true", help="print the JSON report (default)")

    def handle(self, *args, **options) -> None:
        report = run_bench(
            rollouts=options["rollouts"], seed=options["seed"], classes=options["classes"]
        )
        self.stdout.write(json.dumps(report, indent=2))
