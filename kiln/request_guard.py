"""Refuse, before any view runs, request paths and query strings no view can store or compare.

PostgreSQL rejects a NUL character in every text value, so `?actor=%00` or a path
segment `%00` reaching a filter is a database error (a 500), whichever view reads it;
an unpaired surrogate cannot even be encoded to send. One check here covers every
page, API view and the admin, instead of each reader remembering it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse, JsonResponse

from kiln.errors import InvalidParameter
from kiln.params import ParamError, parse_text

MAX_PARAMETER_LENGTH = 4096  # per value; the longest a Kiln filter uses is 300


def check_request(request: HttpRequest) -> None:
    """Raise ParamError for a NUL, an unpaired surrogate or an over-long value in the path or
    in any query parameter (names included)."""
    parse_text(request.path, "path", max_length=MAX_PARAMETER_LENGTH)
    for name, values in request.GET.lists():
        parse_text(name, "parameter name", max_length=MAX_PARAMETER_LENGTH)
        for value in values:
            parse_text(value, name[:100], max_length=MAX_PARAMETER_LENGTH)


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/scheduler/")) or "application/json" in (
        request.headers.get("Accept", "")
    )


class RequestGuardMiddleware:
    """400 for a request whose path or query string holds what no view may pass on."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            check_request(request)
        except ParamError as exc:
            error = InvalidParameter.from_param(exc)
            if _wants_json(request):
                return JsonResponse(
                    {"code": error.code, "message": error.message, "extra": error.extra},
                    status=400,
                )
            raise BadRequest(error.message) from exc
        return self.get_response(request)
