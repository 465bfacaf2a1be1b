"""`python manage.py lifecycle_demo --environments 12 --seed 7 --json`: expired environments whose
workloads answer real HTTP terminate checks; counts deferrals and forced disruptions.

See bench/portal/lifecycle_demo.py. Nothing is tuned on its output: the class timings are the
defaults in portal/conf.py, the seed only draws behaviours.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from bench.portal.lifecycle_demo import lifecycle_demo
from kiln import benchjson


class Command(BaseCommand):
    help = (
        "Expire environments whose workloads say not yet; count deferrals and forced disruptions."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--environments", type=int, default=12)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--port", type=int, default=8171, help="the local check server's port")
        parser.add_argument("--pass-minutes", type=int, default=5, help="simulated reaper period")
        parser.add_argument("--json", action="store_true", help="print the JSON report only")

    def handle(self, *args, **options) -> None:
        date = benchjson.now()
        report = lifecycle_demo(
            environments=options["environments"],
            seed=options["seed"],
            port=options["port"],
            pass_minutes=options["pass_minutes"],
        )
        report = benchjson.stamped(report, name="lifecycle_demo", date=date)
        self.stdout.write(json.dumps(report, indent=2, default=str))
