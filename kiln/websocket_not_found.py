"""The answer to a websocket handshake on a path no route serves: a 404, never a traceback.

Channels' `URLRouter` raises `ValueError("No route found for path ...")` for such a path,
so the ASGI server logged "Exception in ASGI application" with a traceback for every
handshake anyone sent to `/ws/anything`. `NOT_FOUND_ROUTE`, matched last, refuses the
handshake instead: with an HTTP 404 and Kiln's error body where the server offers the ASGI
`websocket.http.response` extension (uvicorn does), else with a close before accepting
(the server answers 403). Nothing is logged above INFO.
"""

from __future__ import annotations

from typing import Any

import orjson
from django.urls import re_path

NOT_FOUND_BODY = orjson.dumps(
    {"code": "not_found", "message": "no websocket stream at this path", "extra": {}}
)
_DENIAL = "websocket.http.response"


async def websocket_not_found(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """ASGI app: refuse a websocket handshake with a 404 (or a close where no denial response is offered)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return  # the client went away before its handshake was read
    if _DENIAL in (scope.get("extensions") or {}):
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(NOT_FOUND_BODY)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "websocket.http.response.start", "status": 404, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": NOT_FOUND_BODY})
        return
    await send({"type": "websocket.close", "code": 1008})


# Last in the router: every path the apps' routes did not take.
NOT_FOUND_ROUTE = re_path(r"", websocket_not_found)
