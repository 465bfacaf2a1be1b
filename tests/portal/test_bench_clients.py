"""The provisioning bench's HTTP client against a real HTTP server on loopback: bearer tokens,
one keep-alive connection per thread, and a request resent once on a new connection when the
server has closed the idle one."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.portal.clients import HttpApi
from tests.support.serving import serve_in_thread


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str, str, int]] = []
    close_after_answer = False

    def do_POST(self) -> None:  # noqa: N802 - the handler's protocol
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Recorder.seen.append(
            (
                self.path,
                self.headers.get("Authorization", ""),
                self.headers.get("Idempotency-Key", ""),
                body.get("name", body.get("reason", "")),
                self.client_address[1],
            )
        )
        answer = json.dumps({"id": "env_1"}).encode()
        self.send_response(201 if self.path.endswith("/environments/") else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        # An idle keep-alive connection closed by the server, without saying so in the answer.
        self.close_connection = Recorder.close_after_answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    Recorder.seen, Recorder.close_after_answer = [], False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = serve_in_thread(httpd, start=False)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_calls_carry_each_persons_token_and_keep_one_connection(server):
    api = HttpApi(port=server.server_port, engineer_token="e-tok", approver_token="a-tok")
    assert api.create({"name": "one"}, "k1") == (201, {"id": "env_1"})
    assert api.approve("env_1") == 200
    assert api.create({"name": "two"}, "k2") == (201, {"id": "env_1"})
    paths = [(p, auth, key, what) for p, auth, key, what, _ in Recorder.seen]
    assert paths == [
        ("/api/v1/environments/", "Bearer e-tok", "k1", "one"),
        ("/api/v1/environments/env_1/approve/", "Bearer a-tok", "", "bench"),
        ("/api/v1/environments/", "Bearer e-tok", "k2", "two"),
    ]
    assert len({port for *_, port in Recorder.seen}) == 1  # one keep-alive connection


def test_a_request_on_a_connection_the_server_closed_is_sent_again_on_a_new_one(server):
    api = HttpApi(port=server.server_port, engineer_token="e-tok", approver_token="a-tok")
    Recorder.close_after_answer = True
    assert api.create({"name": "one"}, "k1")[0] == 201
    assert api.create({"name": "two"}, "k2")[0] == 201
    assert [what for *_, what, _ in Recorder.seen] == ["one", "two"]
    assert len({port for *_, port in Recorder.seen}) == 2


def test_each_client_thread_has_its_own_connection(server):
    api = HttpApi(port=server.server_port, engineer_token="e-tok", approver_token="a-tok")
    threads = [
        threading.Thread(target=api.create, args=({"name": f"t{i}"}, f"k{i}")) for i in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({port for *_, port in Recorder.seen}) == 3
