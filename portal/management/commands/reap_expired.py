"""Start teardown of expired environments and resume stalled work. Dry run until --for-real."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from portal.services import environments_reap_expired


class Command(BaseCommand):
    help = "Reap expired environments (prints what it would do; --for-real to do it)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--for-real", action="store_true", help="actually start teardowns")

    def handle(self, *args, **options) -> None:
        report = environments_reap_expired(dry_run=not options["for_real"])
        report["dry_run"] = not options["for_real"]
        self.stdout.write(json.dumps(report, indent=2))
