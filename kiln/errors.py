"""Domain errors and the one place that turns them into HTTP responses.

Services raise `KilnError` subclasses; the DRF handler renders every error as
`{"code", "message", "extra"}`. A `ValidationError` is a 400 with the field
errors in `extra.fields`. Anything unexpected stays a 500 and is logged.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response

from kiln.params import ParamError
from kiln.parsers import RequestTooLarge


class KilnError(Exception):
    """Base of every domain error: a stable code, an HTTP status and a human message."""

    code = "error"
    http_status = 400

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra or {}


class InvalidInput(KilnError):
    """The request's content breaks a rule (400); `extra` may name the fields."""

    code = "invalid"
    http_status = 400


class InvalidParameter(InvalidInput):
    """A query parameter out of its accepted form or range (raised from `kiln.params`)."""

    code = "invalid_parameter"

    @classmethod
    def from_param(cls, exc: ParamError) -> InvalidParameter:
        return cls(f"Query parameter `{exc.name}` {exc.message}.", extra=exc.as_extra())


class NotAuthenticated(KilnError):
    """No identity came with a request that needs one (401)."""

    code = "not_authenticated"
    http_status = 401


class Forbidden(KilnError):
    """The actor is known but may not do this (403); an object they may not see is a
    `NotFound` instead, so a refusal never confirms that it exists."""

    code = "forbidden"
    http_status = 403


class NotFound(KilnError):
    """No such object, or none the actor may see (404)."""

    code = "not_found"
    http_status = 404


class Conflict(KilnError):
    """The request does not fit the object's current state (409): retrying as is will not help
    until that state changes."""

    code = "conflict"
    http_status = 409


class IllegalTransition(Conflict):
    """A lifecycle transition its table does not allow from the current state (409)."""

    code = "illegal_transition"


class IdempotencyKeyReused(KilnError):
    """An Idempotency-Key used before by the same caller with a different body (422): a retry
    must resend what it sent, so the key cannot name two different requests."""

    code = "idempotency_key_reused"
    http_status = 422


class Unavailable(KilnError):
    """Something the request needs is down or not configured here (503)."""

    code = "unavailable"
    http_status = 503


def error_body(code: str, message: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "extra": extra or {}}


_DRF_CODES = {
    drf_exceptions.NotAuthenticated: "not_authenticated",
    drf_exceptions.AuthenticationFailed: "authentication_failed",
    drf_exceptions.PermissionDenied: "forbidden",
    drf_exceptions.NotFound: "not_found",
    drf_exceptions.MethodNotAllowed: "method_not_allowed",
    drf_exceptions.NotAcceptable: "not_acceptable",
    drf_exceptions.UnsupportedMediaType: "unsupported_media_type",
    drf_exceptions.Throttled: "throttled",
    drf_exceptions.ParseError: "malformed",
    drf_exceptions.ValidationError: "invalid",
    RequestTooLarge: "too_large",
}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF EXCEPTION_HANDLER: one error shape for every API error."""
    if isinstance(exc, ParamError):
        exc = InvalidParameter.from_param(exc)
    if isinstance(exc, KilnError):
        return Response(error_body(exc.code, exc.message, exc.extra), status=exc.http_status)
    if isinstance(exc, DjangoValidationError):
        fields = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        return Response(
            error_body("invalid", "The request is invalid.", {"fields": fields}), status=400
        )
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    if not isinstance(exc, drf_exceptions.APIException):
        return None  # unexpected: a 500, logged by Django
    code = next((c for t, c in _DRF_CODES.items() if isinstance(exc, t)), "error")
    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
        if isinstance(exc, drf_exceptions.AuthenticationFailed):
            # RFC 6750 section 3: say why the bearer token was refused.
            reason = str(exc.detail).replace('"', "'")
            headers["WWW-Authenticate"] += f', error="invalid_token", error_description="{reason}"'
    if isinstance(exc, drf_exceptions.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        body = error_body(code, "The request is invalid.", {"fields": detail})
    else:
        body = error_body(code, str(exc.detail))
    return Response(body, status=exc.status_code, headers=headers)
