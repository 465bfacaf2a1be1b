"""Conditional reads that may wait: ETag, If-None-Match (RFC 9110) and `Prefer: wait` (RFC 7240).

A client that follows a resource sends back the ETag it holds with `If-None-Match`, and
`Prefer: wait=N` to be answered when the resource changes, at most N seconds later (capped at
MAX_WAIT_SECONDS). Unchanged after the wait: 304 Not Modified with no body. Changed: 200
with the new representation and its ETag. One request per change replaces a poll loop, and
the answer comes as soon as the change commits rather than at the next poll.

A preference the server cannot honour is ignored, as RFC 7240 asks (no wait, and no
`Preference-Applied`); an If-None-Match that names another version is answered at once, and
so is `If-None-Match: *` (it names no version to wait for a change from).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

MAX_WAIT_SECONDS = 30
WAIT_PREFERENCE = re.compile(r"^\s*wait\s*=\s*([0-9]{1,6})\s*$", re.IGNORECASE)


def etag_of(payload: Any) -> str:
    """A strong ETag: a hash of the representation's canonical JSON."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), cls=DjangoJSONEncoder)
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def preferred_wait(request: Request) -> int | None:
    """Seconds from `Prefer: wait=N` (capped at MAX_WAIT_SECONDS); None without a usable one."""
    for header in request.headers.get("Prefer", "").split(","):
        for preference in header.split(";")[:1]:  # a preference's own parameters do not apply
            found = WAIT_PREFERENCE.match(preference)
            if found and int(found.group(1)) > 0:
                return min(int(found.group(1)), MAX_WAIT_SECONDS)
    return None


def _held(request: Request) -> list[str]:
    return [
        tag.strip().removeprefix("W/")
        for tag in request.headers.get("If-None-Match", "").split(",")
    ]


def none_match(request: Request, etag: str) -> bool:
    """True when If-None-Match names `etag` (or `*`): the client already holds this version."""
    held = _held(request)
    return "*" in held or etag in held


def answer(
    request: Request,
    payload: dict[str, Any],
    *,
    wait_for_change: Callable[[int], dict[str, Any]],
) -> Response:
    """200 with `payload` and its ETag, or 304 when the client holds it already.

    When the client holds it and prefers to wait, `wait_for_change(seconds)` is called: it
    returns the representation once it changed or the seconds ran out.
    """
    etag = etag_of(payload)
    headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
    if none_match(request, etag):
        seconds = preferred_wait(request)
        # A wait is for a change from a version the client names; `*` names none.
        if seconds is not None and etag in _held(request):
            headers["Preference-Applied"] = f"wait={seconds}"
            payload = wait_for_change(seconds)
            etag = headers["ETag"] = etag_of(payload)
        if none_match(request, etag):
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers=headers)
    return Response(payload, headers=headers)
