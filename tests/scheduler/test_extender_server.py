"""The extender process's HTTP protocol: one socket write per response, nothing reordered or lost."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time

import pytest
import uvicorn

from bench.scheduler import extender as bench
from scheduler.extender.handler import ExtenderASGI
from scheduler.extender.server import HOLD_BELOW_BYTES, CoalescingTransport, ExtenderHttpProtocol


class RecordingTransport:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, chunks) -> None:
        self.calls.append(("writelines", b"".join(chunks)))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closed = True

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 1) if name == "peername" else None


def test_headers_go_out_with_the_body_in_one_write():
    async def scenario():
        raw = RecordingTransport()
        transport = CoalescingTransport(raw, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n")
        assert raw.calls == []  # held
        transport.write(b"hello")
        assert raw.calls == [("writelines", b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")]
        await asyncio.sleep(0)  # the scheduled flush finds nothing held
        assert len(raw.calls) == 1
        assert transport.get_extra_info("peername") == ("127.0.0.1", 1)

    asyncio.run(scenario())


def test_a_lone_small_write_goes_out_on_the_next_loop_turn():
    async def scenario():
        raw = RecordingTransport()
        transport = CoalescingTransport(raw, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")  # e.g. HEAD: no body write follows
        await asyncio.sleep(0)
        assert raw.calls == [("write", b"HTTP/1.1 200 OK\r\n\r\n")]
        big = b"x" * HOLD_BELOW_BYTES
        transport.write(big)  # large writes are never held
        assert raw.calls[-1] == ("write", big)
        transport.write(b"tail")
        transport.close()  # closing sends what is held first
        assert raw.calls[-2:] == [("write", b"tail"), ("close", b"")]

    asyncio.run(scenario())


@pytest.fixture
def extender_server():
    """A real uvicorn server with the extender's protocol on a free loopback port."""
    snapshot = bench.synthetic_snapshot(500)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        ExtenderASGI(lambda: snapshot),
        host="127.0.0.1",
        port=port,
        http=ExtenderHttpProtocol,
        ws="none",
        lifespan="off",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    yield snapshot, port
    server.should_exit = True
    thread.join(timeout=10)


def test_filter_and_prioritize_over_one_keep_alive_connection(extender_server):
    snapshot, port = extender_server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for workload_class in (None, "standard", "batch", "latency-sensitive") * 2:
        body = bench.sample_body(snapshot.names, workload_class)
        conn.request("POST", "/scheduler/filter", body=body)
        response = conn.getresponse()
        result = json.loads(response.read())
        assert response.status == 200
        assert response.getheader("content-type") == "application/json"
        assert len(result["NodeNames"]) + len(result["FailedNodes"]) + len(
            result["FailedAndUnresolvableNodes"]
        ) == len(snapshot.names)
        passing = bench.sample_body(result["NodeNames"], workload_class)
        conn.request("POST", "/scheduler/prioritize", body=passing)
        response = conn.getresponse()
        ranked = json.loads(response.read())
        assert [e["Host"] for e in ranked] == result["NodeNames"]
    conn.request("POST", "/scheduler/filter", body=b"{broken")
    response = conn.getresponse()
    assert response.status == 400 and json.loads(response.read())["code"] == "malformed"
    conn.close()


def test_head_and_expect_continue_are_answered(extender_server):
    _, port = extender_server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("HEAD", "/healthz")
    response = conn.getresponse()
    assert response.status == 200 and response.read() == b""
    # A client that waits for 100 Continue before sending the body (curl does for big bodies).
    body = json.dumps({"Pod": {}, "NodeNames": ["node-00001"]}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        head = (
            f"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
        )
        sock.sendall(head.encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        reply = b""
        while b'"Error"' not in reply:
            chunk = sock.recv(65536)
            assert chunk
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200 OK")
