"""A websocket handshake on a path no route serves is refused with a 404 (or a close), never an
exception out of the ASGI application (which the server logs as a traceback)."""

from __future__ import annotations

import logging

import orjson
import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator

from kiln.asgi import application

HEADERS = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
UNKNOWN = ["/ws/nope/", "/ws/", "/ws/rollouts/", "/ws/rollouts/r1/extra/", "/ws/../etc/passwd",
           "/", "/api/v1/", "/ws/%00/", "/ws/\u00e9t\u00e9/"]  # fmt: skip


def handshake(path: str, extensions: dict | None) -> list[dict]:
    """Send one websocket handshake on `path` and return what the application sent back."""
    scope = {
        "type": "websocket",
        "path": path,
        "raw_path": path.encode("utf-8"),
        "query_string": b"",
        "headers": HEADERS,
        "subprotocols": [],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    if extensions is not None:
        scope["extensions"] = extensions

    async def run() -> list[dict]:
        socket = ApplicationCommunicator(application, scope)
        await socket.send_input({"type": "websocket.connect"})
        sent = [await socket.receive_output(5)]
        while sent[-1]["type"] == "websocket.http.response.start" or sent[-1].get("more_body"):
            sent.append(await socket.receive_output(5))
        await socket.wait(5)  # the application returned: it raised nothing
        return sent

    return async_to_sync(run)()


def _no_error_logged(caplog) -> bool:
    return not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.django_db
@pytest.mark.parametrize("path", UNKNOWN)
def test_an_unknown_path_is_a_404_where_the_server_offers_a_denial_response(path, caplog):
    caplog.set_level(logging.WARNING)
    start, body = handshake(path, {"websocket.http.response": {}})
    assert start["type"] == "websocket.http.response.start"
    assert start["status"] == 404
    assert orjson.loads(body["body"])["code"] == "not_found"
    assert _no_error_logged(caplog)


@pytest.mark.django_db
@pytest.mark.parametrize("path", UNKNOWN)
def test_an_unknown_path_is_closed_before_accepting_elsewhere(path, caplog):
    caplog.set_level(logging.WARNING)
    (close,) = handshake(path, None)
    assert close == {"type": "websocket.close", "code": 1008}
    assert _no_error_logged(caplog)
