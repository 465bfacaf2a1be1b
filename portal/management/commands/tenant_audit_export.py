"""Print an environment's tenant audit archive as JSON, verified against Kiln's audit chain."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from portal.models import Environment
from portal.services.tenant_audit import tenant_audit_export


class Command(BaseCommand):
    help = "Export an environment's tenant audit archive (also after it is deleted); exit 1 if it does not verify."

    def add_arguments(self, parser) -> None:
        parser.add_argument("environment", help="the environment's id (public_id)")

    def handle(self, *args, **options) -> None:
        env = Environment.objects.filter(public_id=options["environment"]).first()
        if env is None:
            raise CommandError(f"no environment {options['environment']}")
        report = tenant_audit_export(environment=env)
        self.stdout.write(json.dumps(report, indent=2, sort_keys=True))
        if not report["verified"]:
            raise CommandError("the archive does not verify: " + "; ".join(report["problems"]))
