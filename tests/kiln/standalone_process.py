"""Start `manage.py standalone` as a real subprocess on a free port with a fresh var/ directory.

Used by the standalone smoke test and by the browser tests (tests/e2e/conftest.py).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import shape

ROOT = Path(__file__).resolve().parents[2]
TOKEN_LINE = re.compile(r"export KILN_TOKEN_([A-Z_]+)=(\S+)")
LOGIN_LINE = re.compile(r"^\s+(\w+)\s+(\S+-kiln-demo)\s+(\S+)\s+(\S+)$", re.M)

# Variables that would point the child at the test run's PostgreSQL/Redis or keys.
_DROP = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND")


@dataclass
class Standalone:
    """A running standalone Kiln: its URL, the tokens and logins it printed, and the process."""

    base_url: str
    process: subprocess.Popen
    stdout_path: Path
    stderr_path: Path
    tokens: dict[str, str] = field(default_factory=dict)  # role -> bearer token
    logins: dict[str, str] = field(default_factory=dict)  # username -> password

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def get_json(self, path: str, token: str | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(self.base_url + path)  # noqa: S310 - our http URL
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")


def free_port() -> int:
    """A loopback port whose next three are free too (a load run takes the port and the three
    after it), below the ephemeral range; with KILN_TEST_PORTS=LOW-HIGH, from that range, for a
    shared machine."""
    span = os.environ.get("KILN_TEST_PORTS", "")
    if not span:
        return shape.free_port(span=4)
    low, high = (int(p) for p in span.split("-", 1))
    starts = list(range(low, high - 2, 4))
    random.shuffle(starts)
    for start in starts:
        if all(shape.port_binds(start + i) for i in range(4)):
            return start
    raise RuntimeError(f"no four free ports in KILN_TEST_PORTS={span}")


def start(
    var_dir: Path, *, timeout: float = 60.0, environment: dict[str, str] | None = None
) -> Standalone:
    """Start standalone on a free port and wait until /readyz answers and the banner is printed.

    `environment`: variables set for it on top of the cleaned environment (e.g. OTEL_*)."""
    var_dir.mkdir(parents=True, exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _DROP and not k.startswith(("KILN_", "DJANGO_", "OTEL_"))
    }
    env.update({"KILN_VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1", **(environment or {})})
    port = free_port()
    stdout_path, stderr_path = var_dir / "standalone.out", var_dir / "standalone.err"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "standalone", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=err,
        )
    server = Standalone(f"http://127.0.0.1:{port}", process, stdout_path, stderr_path)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"standalone exited with {process.returncode}:\n{server.stderr()[-3000:]}"
            )
        if time.monotonic() > deadline:
            stop(server)
            raise TimeoutError(f"standalone not ready in {timeout} s:\n{server.stderr()[-3000:]}")
        try:
            status, _ = server.get_json("/readyz")
        except (OSError, ValueError):
            status = 0
        if status == 200 and "KILN_TOKEN_PLATFORM_ADMIN=" in server.stdout():
            break
        time.sleep(0.2)
    text = server.stdout()
    server.tokens = {m[1].lower().replace("_", "-"): m[2] for m in TOKEN_LINE.finditer(text)}
    server.logins = {m[1]: m[2] for m in LOGIN_LINE.finditer(text)}
    return server


def stop(server: Standalone, *, timeout: float = 15.0, sig: int = signal.SIGTERM) -> int:
    """Signal the server (SIGTERM, or SIGINT like Ctrl-C) and return its exit code.

    Kills it, and raises, if it does not stop within `timeout`.
    """
    if server.process.poll() is None:
        server.process.send_signal(sig)
    try:
        return server.process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=5)
        raise
