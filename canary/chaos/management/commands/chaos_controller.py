"""`python manage.py chaos_controller --experiment ID`: hold one experiment's lease in this process."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from canary.chaos.controller import chaos_controller_run, controller_identity


class Command(BaseCommand):
    help = "Run the chaos controller for one experiment until it ends (SIGKILL-safe: the reaper reverts)."
    requires_system_checks: list = []  # a runtime process: start fast, checks belong to deploys

    def add_arguments(self, parser) -> None:
        parser.add_argument("--experiment", required=True, help="experiment id")
        parser.add_argument(
            "--holder", default="", help="holder identity (default: host:pid:random)"
        )

    def handle(self, *args, **options) -> None:
        holder = options["holder"] or controller_identity("cmd")
        outcome = chaos_controller_run(experiment_id=options["experiment"], holder=holder)
        self.stdout.write(
            json.dumps({"experiment": options["experiment"], "holder": holder, "outcome": outcome})
        )
