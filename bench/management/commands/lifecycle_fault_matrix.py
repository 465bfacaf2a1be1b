"""`python manage.py lifecycle_fault_matrix --json`: SIGKILL the worker at every provisioning and
teardown step, recover, and print the table (step killed x objects left x events lost).

See bench/portal/fault_matrix.py for what a trial does and counts. The target: every trial
killed, every environment DELETED, 0 objects left, 0 events lost, 0 duplicated.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError
from django.test.utils import override_settings

from bench.portal.fault_matrix import fault_matrix
from kiln import benchjson


class Command(BaseCommand):
    help = "Kill the worker at each lifecycle step, recover, count objects left and events lost."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--profile", default="zero", choices=["zero", "fast", "realistic"])
        parser.add_argument("--json", action="store_true", help="print the JSON report only")

    def handle(self, *args, **options) -> None:
        date = benchjson.now()
        with override_settings(KILN_SIM_DELAY_PROFILE=options["profile"]):
            report = fault_matrix()
        report = benchjson.stamped(
            {"profile": options["profile"], **report}, name="lifecycle_fault_matrix", date=date
        )
        if not options["json"]:
            for row in report["table"]:
                self.stdout.write(
                    f"{row['phase']:13} {row['step']:20} {row['recovery']:7} killed={row['killed']}"
                    f" left={row['objects_left']} lost={row['events_lost']}"
                    f" dup={row['events_duplicated']} -> {row['final_status']}"
                )
        self.stdout.write(json.dumps(report, indent=2, default=str))
        if report["objects_left"] or report["events_lost"] or not report["all_deleted"]:
            raise CommandError("the fault matrix found objects left behind or events lost")
