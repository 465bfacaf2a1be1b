"""DRF authentication: `Authorization: Bearer <RS256 JWT>` verified against the JWKS."""

from __future__ import annotations

import threading

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from kiln.identity import tokens
from kiln.identity.keys import JWKSet
from kiln.identity.services import user_from_claims

_jwks_lock = threading.Lock()
_jwks: JWKSet | None = None


def jwks() -> JWKSet:
    """The process-wide JWKS cache for the configured source."""
    global _jwks
    with _jwks_lock:
        if _jwks is None or _jwks.source != settings.KILN_JWT_JWKS:
            _jwks = JWKSet(settings.KILN_JWT_JWKS, settings.KILN_JWT_JWKS_CACHE_SECONDS)
        return _jwks


def verifier_config() -> tokens.VerifierConfig:
    return tokens.VerifierConfig(
        issuer=settings.KILN_JWT_ISSUER,
        audience=settings.KILN_JWT_AUDIENCE,
        leeway_seconds=settings.KILN_JWT_LEEWAY_SECONDS,
    )


def verify_bearer(token: str) -> dict:
    """Verified claims of a bearer token, or TokenRejected (shared by HTTP and websockets)."""
    return tokens.verify(token, jwks(), verifier_config())


class JWTAuthentication(authentication.BaseAuthentication):
    """Authenticate API clients by bearer token; `request.auth` holds the verified claims."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None  # not ours; session auth may still apply
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("malformed Authorization header")
        try:
            token = header[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("malformed token") from exc
        try:
            claims = verify_bearer(token)
        except tokens.TokenRejected as exc:
            raise exceptions.AuthenticationFailed(exc.reason) from exc
        user = user_from_claims(claims=claims)
        if not user.is_active:
            raise exceptions.AuthenticationFailed("user is deactivated")
        return user, claims

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="kiln"'


class JWTAuthenticationScheme(OpenApiAuthenticationExtension):
    """Describe bearer JWT authentication in the OpenAPI schema."""

    target_class = JWTAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT (RS256)"}
