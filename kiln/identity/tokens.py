"""RS256 JWT bearer tokens: issuing (kiln_token, standalone) and verifying (the API).

Verification is pinned to RS256: the header's `alg` must be RS256 before any
key is touched, so `none` and HS256-with-the-public-key are refused outright.
`exp`, `iat`, `sub`, `iss` and `aud` are required; `nbf` is honoured; leeway is
at most 30 seconds. A rejection carries a short reason that names the failed
check and never the internals.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import jwt

from kiln.identity.keys import JWKSet, KeysUnavailable

ALGORITHM = "RS256"
MAX_LEEWAY_SECONDS = 30
REQUIRED_CLAIMS = ("exp", "iat", "sub", "iss", "aud")
MAX_SUB_LENGTH = 150  # Django user names; a longer sub is refused, never truncated


class TokenRejected(Exception):
    """The token is not acceptable; `reason` is safe to show the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class VerifierConfig:
    issuer: str
    audience: str
    leeway_seconds: int = 10


def issue(
    *,
    private_key: Any,
    kid: str,
    issuer: str,
    audience: str,
    sub: str,
    roles: list[str],
    team: str | None = None,
    teams: list[str] | None = None,
    ttl_seconds: int = 3600,
    now: float | None = None,
) -> str:
    """Sign a token for `sub` with `roles` (and `team`, and a `teams` list) valid for `ttl_seconds`.

    Kiln's memberships follow these claims at every authentication (see
    kiln.identity.services.membership_reconcile).
    """
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": audience,
        "sub": sub,
        "iat": issued,
        "nbf": issued,
        "exp": issued + ttl_seconds,
        "jti": uuid.uuid4().hex,
        "roles": roles,
    }
    if team:
        claims["team"] = team
    if teams is not None:
        claims["teams"] = list(teams)
    return jwt.encode(claims, private_key, algorithm=ALGORITHM, headers={"kid": kid})


def verify(token: str, keys: JWKSet, config: VerifierConfig) -> dict[str, Any]:
    """Return the verified claims of `token` or raise TokenRejected."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise TokenRejected("malformed token") from exc
    if header.get("alg") != ALGORITHM:
        raise TokenRejected("algorithm not allowed")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise TokenRejected("token has no key id")
    try:
        jwk = keys.get(kid)
    except KeysUnavailable as exc:
        raise TokenRejected("signing keys unavailable") from exc
    if jwk is None:
        raise TokenRejected("unknown key id")
    try:
        public_key = jwt.PyJWK(jwk, algorithm=ALGORITHM).key
        claims = jwt.decode(
            token,
            public_key,
            algorithms=[ALGORITHM],
            audience=config.audience,
            issuer=config.issuer,
            leeway=min(config.leeway_seconds, MAX_LEEWAY_SECONDS),
            options={"require": list(REQUIRED_CLAIMS), "verify_signature": True},
        )
    except jwt.ExpiredSignatureError as exc:
        raise TokenRejected("token expired") from exc
    except jwt.ImmatureSignatureError as exc:
        raise TokenRejected("token not yet valid") from exc
    except jwt.InvalidAudienceError as exc:
        raise TokenRejected("wrong audience") from exc
    except jwt.InvalidIssuerError as exc:
        raise TokenRejected("wrong issuer") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise TokenRejected(f"missing claim: {exc.claim}") from exc
    except jwt.InvalidSignatureError as exc:
        raise TokenRejected("bad signature") from exc
    except jwt.PyJWTError as exc:
        raise TokenRejected("invalid token") from exc
    if not isinstance(claims.get("sub"), str) or not claims["sub"].strip():
        raise TokenRejected("missing claim: sub")
    if len(claims["sub"]) > MAX_SUB_LENGTH:
        raise TokenRejected("sub too long")
    return claims
