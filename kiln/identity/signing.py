"""Issue tokens with the configured private key (kiln_token, standalone's printed tokens)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from kiln.identity import keys, tokens
from kiln.identity.permissions import ROLES


def ensure_dev_keys() -> None:
    """Create the dev key pair and JWKS under var/jwt/ when no JWKS is configured.

    Only when the private key is the dev one beside that JWKS: a private key of
    your own (KILN_JWT_PRIVATE_KEY) is never replaced or shadowed by a generated pair.
    """
    jwks_dir = Path(settings.KILN_JWT_JWKS).parent
    if (
        settings.KILN_JWT_JWKS_IS_DEV
        and Path(settings.KILN_JWT_PRIVATE_KEY) == jwks_dir / "private.pem"
    ):
        keys.generate_key_pair(jwks_dir)


def _kid_for(private_key) -> str:
    """The configured kid, else the kid of the JWKS entry whose modulus matches the private key."""
    if settings.KILN_JWT_KID:
        return settings.KILN_JWT_KID
    jwk = keys.public_jwk(private_key.public_key(), "probe")
    published = keys.JWKSet(settings.KILN_JWT_JWKS, cache_seconds=0)  # a file or a URL
    for kid in published.kids():
        entry = published.get(kid) or {}
        if entry.get("n") == jwk["n"] and entry.get("e") == jwk["e"]:
            return kid
    raise keys.KeysUnavailable(
        "no key in the JWKS matches the private key; publish it or set KILN_JWT_KID"
    )


def issue_token(
    *,
    sub: str,
    roles: list[str],
    team: str | None = None,
    teams: list[str] | None = None,
    ttl_seconds: int = 3600,
) -> str:
    """A signed RS256 token for `sub` with `roles`, verifiable by Kiln's JWKS."""
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(unknown)}; roles are {', '.join(ROLES)}")
    if ttl_seconds <= 0:
        raise ValueError("ttl must be positive")
    ensure_dev_keys()
    private_key = keys.load_private_key(settings.KILN_JWT_PRIVATE_KEY)
    return tokens.issue(
        private_key=private_key,
        kid=_kid_for(private_key),
        issuer=settings.KILN_JWT_ISSUER,
        audience=settings.KILN_JWT_AUDIENCE,
        sub=sub,
        roles=roles,
        team=team,
        teams=teams,
        ttl_seconds=ttl_seconds,
    )
