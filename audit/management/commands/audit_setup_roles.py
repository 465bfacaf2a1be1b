"""Create the PostgreSQL roles of the audit chain and grant them their privileges (idempotent)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from audit.services import roles_setup


class Command(BaseCommand):
    help = (
        "PostgreSQL: a writer role that alone may INSERT into the chain, an application role "
        "that may only SELECT it. Run by `make dev` and `make test` after migrate."
    )

    def add_arguments(self, parser):
        parser.add_argument("--writer-role", default=settings.KILN_AUDIT_WRITER_ROLE)
        parser.add_argument("--app-role", default=settings.KILN_AUDIT_APP_ROLE)

    def handle(self, *args, **opts):
        done = roles_setup(writer_role=opts["writer_role"], app_role=opts["app_role"])
        for line in done:
            self.stdout.write(line)
