"""The simulated kube-scheduler's HTTP client against servers that misbehave: it reopens a
connection the server closed, and anything it cannot read is a 503 with the reason."""

from __future__ import annotations

import socket
import socketserver
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import pytest

from scheduler.extender.client import HttpExtender
from tests.support.serving import serve_in_thread


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: _Server = self.server  # type: ignore[assignment]
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = int(
                next(v for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")[1:])
                     if k.lower() == b"content-length")
            )  # fmt: skip
            while len(buffer) < length:
                buffer += self.request.recv(65536)
            body, buffer = buffer[:length], buffer[length:]
            server.requests.append((head.split(b"\r\n")[0], body))
            self.request.sendall(server.answer(len(server.requests)))
            if server.close_after_each:
                return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answer, close_after_each: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer, self.close_after_each = answer, close_after_each
        self.requests: list[tuple[bytes, bytes]] = []


@contextmanager
def serving(answer, *, close_after_each: bool = False) -> Iterator[_Server]:
    server = _Server(answer, close_after_each)
    thread = serve_in_thread(server, start=False)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def ok(n: int) -> bytes:
    body = orjson.dumps({"n": n})
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body), body,
    )  # fmt: skip


def test_calls_share_one_connection_and_send_the_body_and_token():
    with serving(ok) as server:
        client = HttpExtender("127.0.0.1", server.server_address[1], token="t0k")
        assert [client("filter", b'{"a":1}') for _ in range(3)] == [
            (200, b'{"n":1}'), (200, b'{"n":2}'), (200, b'{"n":3}'),
        ]  # fmt: skip
        client.close()
    assert [line for line, _ in server.requests] == [b"POST /scheduler/filter HTTP/1.1"] * 3
    assert {body for _, body in server.requests} == {b'{"a":1}'}


def test_a_connection_the_server_closed_is_opened_again():
    with serving(ok, close_after_each=True) as server:
        client = HttpExtender("127.0.0.1", server.server_address[1])
        assert [client("prioritize", b"{}")[0] for _ in range(4)] == [200] * 4
        client.close()


@pytest.mark.parametrize(
    "answer",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    ],
    ids=["not-http", "no-length", "bad-status", "cut-short"],
)
def test_an_answer_it_cannot_read_is_a_503_with_the_reason(answer):
    with serving(lambda _n: answer, close_after_each=True) as server:
        client = HttpExtender("127.0.0.1", server.server_address[1], timeout=5)
        status, body = client("filter", b"{}")
    assert status == 503
    assert orjson.loads(body)["Error"].startswith("extender unreachable")


def test_a_refused_connection_is_a_503():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    status, body = HttpExtender("127.0.0.1", port, timeout=2)("filter", b"{}")
    assert status == 503 and b"unreachable" in body
