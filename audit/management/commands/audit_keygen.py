"""Create the Ed25519 checkpoint signing key (KILN_AUDIT_SIGNING_KEY) and its verifier key file."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.chain import notes
from audit.services import public_key_path


class Command(BaseCommand):
    help = "Generate the checkpoint signing key if it does not exist; print the verifier key."

    def handle(self, *args, **opts):
        path = Path(settings.KILN_AUDIT_SIGNING_KEY)
        try:
            key = notes.load_or_create_private_key(path, create=True)
        except notes.NoteError as exc:
            raise CommandError(str(exc)) from exc
        vkey = notes.verifier_key(settings.KILN_AUDIT_ORIGIN, key.public_key())
        public_key_path().write_text(vkey + "\n")
        self.stdout.write(f"signing key {path}\nverifier key {public_key_path()}:\n{vkey}")
