"""A scripted local HTTP server: answers each path with a queue of statuses (the last one repeats).

The disruption tests and the `lifecycle_demo` command stand it in for workloads' terminate checks
and teams' chat webhooks, so those calls are real HTTP over loopback.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.serving import serve_in_thread


class AnsweringServer:
    """`script(path, [503, 503, 200])`; `url(path)`; `requests[path]` holds the bodies received."""

    def __init__(self, port: int = 0) -> None:
        self.scripts: dict[str, deque[tuple[int, dict[str, str]]]] = {}
        self.requests: dict[str, list[bytes]] = defaultdict(list)
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, headers = owner.next_answer(self.path, body)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _answer  # noqa: N815 - http.server's method names

            def log_message(self, *args) -> None:  # noqa: ANN002 - quiet
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self._thread = serve_in_thread(self.server, start=False)

    def __enter__(self) -> AnsweringServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.server.shutdown()
        self.server.server_close()

    def script(self, path: str, answers: list[int | tuple[int, dict[str, str]]]) -> None:
        """Answer `path` with these statuses in turn; the last one repeats."""
        with self._lock:
            self.scripts[path] = deque(a if isinstance(a, tuple) else (a, {}) for a in answers)

    def next_answer(self, path: str, body: bytes) -> tuple[int, dict[str, str]]:
        with self._lock:
            self.requests[path].append(body)
            queue = self.scripts.get(path)
            if not queue:
                return 404, {}
            return queue.popleft() if len(queue) > 1 else queue[0]

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"
