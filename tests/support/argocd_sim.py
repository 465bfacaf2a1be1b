"""A simulated Argo CD: one Application tracking a branch of a bare Git repository, served over
HTTP on the loopback interface.

Its controller syncs the Application when its poll interval comes round (Argo CD's
`timeout.reconciliation`) or as soon as a client asks for a refresh
(`GET /api/v1/applications/<name>?refresh=normal|hard`), whichever is first. A sync reads the
branch's head from the repository (the real `git`), spends `sync_seconds` applying, and records
when each revision became synced, so a caller can measure commit-to-synced time. The API
answers as Argo CD's ApplicationService does in the fields Kiln reads: `status.sync.status`,
`status.sync.revision`, `status.reconciledAt`; a wrong bearer token is a 401, another
Application a 404. No Django: tests and the `gitops_refresh_bench` command run it.
"""

from __future__ import annotations

import subprocess
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from tests.support.kube_sim import JSONHandler
from tests.support.serving import serve_in_thread


class SimulatedArgoCD:
    """See the module docstring. Use as a context manager, or `start()` and `stop()`."""

    def __init__(
        self,
        repo: Path | str,
        *,
        branch: str = "main",
        application: str = "kiln-environments",
        poll_seconds: float = 180.0,
        sync_seconds: float = 0.0,
        token: str = "",
        port: int = 0,
    ) -> None:
        self.repo = Path(repo)
        self.branch = branch
        self.application = application
        self.poll_seconds = poll_seconds
        self.sync_seconds = sync_seconds
        self.token = token
        self.port = port
        self.revision = ""
        self.reconciled_at = 0.0
        self.synced_at: dict[str, float] = {}  # revision -> time.time() it was first synced
        self.synced_by: dict[str, str] = {}  # revision -> what synced it: start, poll or refresh
        self.refreshes = 0
        self.polls = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # --- controller -----------------------------------------------------------------

    def _head(self) -> str:
        result = subprocess.run(
            [
                "git",
                "--git-dir",
                str(self.repo),
                "rev-parse",
                "-q",
                "--verify",
                f"refs/heads/{self.branch}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return result.stdout.strip() if result.returncode == 0 else ""

    def _sync(self, by: str) -> None:
        head = self._head()
        if head and head != self.revision:
            if self.sync_seconds:
                time.sleep(self.sync_seconds)
            with self._lock:
                self.revision = head
                self.synced_at.setdefault(head, time.time())
                self.synced_by.setdefault(head, by)
        with self._lock:
            self.reconciled_at = time.time()

    def _controller(self) -> None:
        next_poll = time.monotonic() + self.poll_seconds
        while not self._stop.is_set():
            woken = self._wake.wait(timeout=max(0.0, next_poll - time.monotonic()))
            if self._stop.is_set():
                return
            self._wake.clear()
            if not woken:
                self.polls += 1
                next_poll = time.monotonic() + self.poll_seconds
            self._sync("refresh" if woken else "poll")

    def refresh(self) -> None:
        """What `?refresh=` does: the controller reconciles now (asynchronously, as Argo CD)."""
        self.refreshes += 1
        self._wake.set()

    # --- API ------------------------------------------------------------------------

    def application_status(self) -> dict:
        """The Application as Argo CD's API returns it, in the fields Kiln reads."""
        head = self._head()
        with self._lock:
            revision, reconciled = self.revision, self.reconciled_at
        return {
            "metadata": {"name": self.application, "namespace": "argocd"},
            "status": {
                "sync": {
                    "status": "Synced" if revision == head else "OutOfSync",
                    "revision": revision,
                },
                "reconciledAt": datetime.fromtimestamp(reconciled, UTC).isoformat()
                if reconciled
                else None,
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        argocd = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if argocd.token and self.headers.get("Authorization") != f"Bearer {argocd.token}":
                    self._send(401, {"error": "invalid session", "code": 16})
                    return
                url = urlparse(self.path)
                prefix = "/api/v1/applications/"
                if not url.path.startswith(prefix):
                    self._send(404, {"error": "not found", "code": 5})
                    return
                if url.path[len(prefix) :] != argocd.application:
                    self._send(404, {"error": "application not found", "code": 5})
                    return
                refresh = parse_qs(url.query).get("refresh", [""])[0]
                if refresh in ("normal", "hard"):
                    argocd.refresh()
                self._send(200, argocd.application_status())

        return Handler

    @property
    def url(self) -> str:
        """Base URL of the API (after `start()`)."""
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> SimulatedArgoCD:
        """Serve the API and run the controller (the first sync happens at once)."""
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._sync("start")
        self._threads = [
            serve_in_thread(self._server, name="argocd-api", start=False),
            threading.Thread(target=self._controller, name="argocd-controller", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop the controller and the server."""
        self._stop.set()
        self._wake.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> SimulatedArgoCD:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
