"""The API's JSON parser: what it accepts can be stored, and nothing it is sent raises a 500.

DRF's own parser already refuses NaN/Infinity literals; this one also refuses numbers that
overflow to infinity (1e400), NUL characters anywhere (PostgreSQL rejects them in text and
jsonb), nesting deep enough to exhaust the decoder's recursion, and bodies over
DATA_UPLOAD_MAX_MEMORY_SIZE (DRF reads the stream itself, past Django's own check).
"""

from __future__ import annotations

import json
import math

from django.conf import settings
from rest_framework import exceptions, parsers, status

from kiln.params import json_problem


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


class JSONParser(parsers.JSONParser):
    """application/json, decoded strictly (see the module docstring)."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if limit else stream.read()
        if limit and len(raw) > limit:
            raise RequestTooLarge(f"The request body is larger than {limit} bytes.")
        try:
            data = json.loads(
                raw.decode(encoding), parse_float=_finite, parse_constant=_no_constants
            )
        except RecursionError as exc:
            raise exceptions.ParseError("JSON parse error - nested too deeply") from exc
        except ValueError as exc:  # also UnicodeDecodeError and too many integer digits
            raise exceptions.ParseError(f"JSON parse error - {exc}") from exc
        problem = json_problem(data)
        if problem:
            raise exceptions.ParseError(f"JSON parse error - the body {problem}")
        return data
