"""/metrics, /healthz and /readyz of the process kinds that are not the web, on their own port.

The worker, beat, audit writer, scheduler extender and chaos reaper each start one small
threaded HTTP server (`start_from_env`) when KILN_METRICS_PORT names a port (the Deployments
set it: worker 9101, beat 9102, audit writer 9103, extender 9104, chaos reaper 9105; the web
answers on its own HTTP port). Without it nothing is started: tests, `make dev` and standalone
mode (where the web's /metrics exports every kind) run as before.

- `/metrics`: `observability.exposition(kind)`, Prometheus text.
- `/healthz` (liveness): 200 unless the kind's `live` checks fail (a writer whose lag keeps
  growing past its bound, a reaper whose passes stopped); a failure is 503 with the check named.
- `/readyz` (readiness): the kind's `ready` checks (the database, the broker, an inventory loaded).

Checks run in the request's own thread, so every database connection it opened is closed after
the answer (Django's connections are per thread).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from prometheus_client import CONTENT_TYPE_LATEST

from kiln import health, observability

log = logging.getLogger("kiln.metrics_server")

PORT_VARIABLE = "KILN_METRICS_PORT"
Checks = dict[str, health.Check]

_STATES = {"/healthz": ("ok", "not live"), "/readyz": ("ready", "not ready")}
_servers: dict[int, MetricsServer] = {}
_servers_lock = threading.Lock()


@dataclass
class MetricsServer:
    """A running metrics and probe server of one process kind."""

    kind: str
    httpd: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        """The port it listens on (the one asked for, or the one given for port 0)."""
        return self.httpd.server_address[1]

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
        with _servers_lock:
            _servers.pop(self.port, None)


def configured_port() -> int | None:
    """KILN_METRICS_PORT as a port number, None when unset or empty; anything else is refused."""
    raw = os.environ.get(PORT_VARIABLE, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ImproperlyConfigured(f"{PORT_VARIABLE}={raw!r} is not a TCP port (1-65535)")
    return int(raw)


def _handler(kind: str, live: Checks, ready: Checks) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "kiln-metrics"

        def do_GET(self) -> None:  # noqa: N802 - http.server's method name
            path = self.path.split("?", 1)[0].rstrip("/")
            try:
                if path == "/metrics":
                    self._answer(200, observability.exposition(kind), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    ok, checks = health.run(live if path == "/healthz" else ready)
                    state = _STATES[path][0 if ok else 1]
                    body = {"status": state, "kind": kind, "checks": checks}
                    self._answer(200 if ok else 503, json.dumps(body).encode(), "application/json")
                else:
                    body = {"code": "not_found", "message": "no such endpoint", "extra": {}}
                    self._answer(404, json.dumps(body).encode(), "application/json")
            finally:
                connections.close_all()

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
            """Scrapes and probes every few seconds: not worth a log line each."""

    return Handler


# How often the serving thread looks for a stop: `stop()` (a process shutting down) waits up to
# this long. The standard library's half second was most of each metrics test's time.
STOP_POLL_SECONDS = 0.05


def start(
    kind: str,
    *,
    port: int,
    host: str = "0.0.0.0",  # noqa: S104 - Prometheus and the kubelet call in over the pod network
    live: Checks | None = None,
    ready: Checks | None = None,
) -> MetricsServer:
    """Serve `kind`'s /metrics, /healthz and /readyz on host:port in a daemon thread."""
    if kind not in observability.KINDS:
        raise ValueError(f"unknown process kind {kind!r}")
    with _servers_lock:
        if port and port in _servers:
            return _servers[port]
        httpd = ThreadingHTTPServer((host, port), _handler(kind, live or {}, ready or {}))
        httpd.daemon_threads = True
        thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": STOP_POLL_SECONDS},
            name=f"metrics-{kind}",
            daemon=True,
        )
        server = MetricsServer(kind, httpd, thread)
        _servers[server.port] = server
    thread.start()
    log.info("%s metrics and probes on %s:%s", kind, host, server.port)
    return server


def start_from_env(
    kind: str, *, live: Checks | None = None, ready: Checks | None = None
) -> MetricsServer | None:
    """`start` on KILN_METRICS_PORT when it is set; None (nothing started) when it is not."""
    port = configured_port()
    if port is None:
        return None
    return start(kind, port=port, live=live, ready=ready)
