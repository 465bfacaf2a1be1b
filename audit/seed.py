"""Demo set-up of the audit chain: the dev checkpoint signing key and its verifier key for auditors."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from audit.services import public_key_path, signing_key


def seed_demo() -> list[str]:
    """Create the dev signing key (standalone / unset KILN_AUDIT_SIGNING_KEY) once; return what was made."""
    if not settings.KILN_AUDIT_SIGNING_KEY_IS_DEV or Path(settings.KILN_AUDIT_SIGNING_KEY).exists():
        return []
    signing_key()
    return [f"audit checkpoint signing key (verifier key for auditors: {public_key_path()})"]
