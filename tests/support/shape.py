"""Kiln's production shape as local processes, the way `make dev` runs them: uvicorn web
(one process per core, summing their metrics in one directory), a prefork Celery worker, Celery
beat, the audit writer and the scheduler extender, each its own process on loopback, against the
database and Redis its environment names. The load test runs all of them; `provision_bench`
runs the web, the worker and the writer.

Each process can be stopped, SIGKILLed and started again by name, which is what the fault runs
do; `ready_after` measures how long `/readyz` takes to answer 200 again. `TokenIssuer` makes the
key pair the web verifies bearer tokens with, and signs the clients' tokens.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from kiln import proxies
from kiln.identity import keys, tokens

# An idle keep-alive connection outlives any client's pause (uvicorn's default, 5 s, closes it
# while a person reads an answer, racing their next request), and a proxy's idle timeout in
# front (60 s is common), so the proxy, not the web, closes first.
WEB_KEEP_ALIVE_SECONDS = 75
# On SIGTERM the web stops taking requests and lets those in flight finish for at most this
# long, then cuts them: the longest Kiln holds is a `Prefer: wait` (up to 30 s), whose client
# asks again. Below Kubernetes' default grace period (30 s), so a restart never waits for the
# SIGKILL: a load-test web restart once took 32 s to answer again without a bound.
WEB_GRACEFUL_SHUTDOWN_SECONDS = 10
PROCESSES = ("web", "worker", "beat", "writer", "extender")


@dataclass
class Process:
    """One process of the shape: its command line, its log file and, while it runs, its Popen."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen | None = None
    cpu_before_restarts: float = 0.0  # CPU seconds of earlier incarnations (killed or restarted)


@dataclass
class Shape:
    """The processes of one run: web on `port`, the extender on `port + 1`."""

    port: int
    environment: dict[str, str]
    workdir: Path
    names: tuple[str, ...] = PROCESSES
    worker_concurrency: int = 2
    web_processes: int = 2
    processes: dict[str, Process] = field(default_factory=dict)
    hostname: str = "kiln-load"  # the worker's Celery node name: <hostname>-<port>@<host>

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The web's processes write their metrics here; /metrics answers their sum. Emptied per
        # run (a web restarted by a fault keeps adding to it, as Prometheus counters go on).
        self.metrics_dir = self.workdir / "prometheus"
        shutil.rmtree(self.metrics_dir, ignore_errors=True)
        self.metrics_dir.mkdir()
        python, celery = sys.executable, str(Path(sys.executable).with_name("celery"))
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        argv = {
            "web": [python, "-m", "uvicorn", "kiln.asgi:application", "--host", "127.0.0.1",
                    "--port", str(self.port), "--workers", str(self.web_processes),
                    "--timeout-keep-alive", str(WEB_KEEP_ALIVE_SECONDS),
                    "--timeout-graceful-shutdown", str(WEB_GRACEFUL_SHUTDOWN_SECONDS),
                    "--no-access-log", "--log-level", "warning",
                    *proxies.uvicorn_args(settings.KILN_TRUSTED_PROXIES)],
            "worker": [celery, "-A", "kiln", "worker", "--pool", "prefork", "--concurrency",
                       str(self.worker_concurrency), "--loglevel", "WARNING", "--hostname",
                       f"{self.hostname}-{self.port}@%h"],
            "beat": [celery, "-A", "kiln", "beat", "--loglevel", "WARNING", "--schedule",
                     str(self.workdir / "celerybeat-schedule")],
            "writer": [python, manage, "audit_writer"],
            "extender": [python, manage, "scheduler_extender", "--host", "127.0.0.1", "--port",
                         str(self.extender_port)],
        }  # fmt: skip
        for name in self.names:
            self.processes[name] = Process(name, argv[name], self.workdir / f"{name}.log")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def extender_port(self) -> int:
        return self.port + 1

    def start(self, name: str) -> None:
        """Start one process (a no-op while it runs)."""
        process = self.processes[name]
        if process.popen is not None and process.popen.poll() is None:
            return
        environment = {**os.environ, **self.environment}
        # Each process names itself in its spans: kiln-web, kiln-worker, ...
        environment["OTEL_SERVICE_NAME"] = f"{environment.get('OTEL_SERVICE_NAME', 'kiln')}-{name}"
        if name == "web":
            environment["PROMETHEUS_MULTIPROC_DIR"] = str(self.metrics_dir)
        with process.log.open("ab") as log:
            process.popen = subprocess.Popen(
                process.argv,
                cwd=settings.BASE_DIR,
                env=environment,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a signal to the shape is not a signal to this process
            )

    def start_all(self, *, timeout: float = 90.0) -> float:
        """Start every process; returns the seconds until the web answers /readyz 200."""
        started = time.monotonic()
        for name in self.names:
            self.start(name)
        self.ready_after(timeout=timeout)
        if "extender" in self.names:
            wait_for_port(self.extender_port, timeout=timeout)
        return time.monotonic() - started

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal one process and its children (the prefork pool), and wait for it to exit."""
        process = self.processes[name]
        if process.popen is None or process.popen.poll() is not None:
            return
        process.cpu_before_restarts += tree_cpu_seconds(process.popen.pid)
        try:
            os.killpg(process.popen.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait(timeout=10)

    def stop_all(self) -> None:
        """SIGTERM every process (warm shutdown), in the reverse order of starting."""
        for name in reversed(self.names):
            self.kill(name, signal.SIGTERM)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) spent by each process and its children so far."""
        out = {}
        for name, process in self.processes.items():
            live = process.popen is not None and process.popen.poll() is None
            now = tree_cpu_seconds(process.popen.pid) if live else 0.0
            out[name] = process.cpu_before_restarts + now
        return out

    def ready_after(self, *, timeout: float = 60.0, since: float | None = None) -> float:
        """Seconds from `since` (monotonic; default now) until /readyz answers 200."""
        since = time.monotonic() if since is None else since
        deadline = since + timeout
        while time.monotonic() < deadline:
            if readyz(self.base_url) == 200:
                return time.monotonic() - since
            time.sleep(0.1)
        raise TimeoutError(f"{self.base_url}/readyz not 200 within {timeout} s")


def readyz(base_url: str) -> int:
    """The status /readyz answers (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(f"{base_url}/readyz", timeout=2) as response:  # noqa: S310 - loopback
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def wait_for_port(port: int, *, timeout: float) -> None:
    """Wait until something accepts connections on 127.0.0.1:`port`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and every live descendant, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = int(fields[11]) + int(fields[12])
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(times.get(p, 0) for p in tree) / tick


class TokenIssuer:
    """A key pair under `key_dir` (made once) for the shape's web to verify bearer tokens with,
    and the tokens it accepts: `environment()` names the keys for the web's processes, `sign()`
    issues a token as the identity provider would."""

    def __init__(self, key_dir: Path, kid: str) -> None:
        self.kid = kid
        self.private_path, self.jwks_path = keys.generate_key_pair(key_dir, kid=kid)
        self._key = keys.load_private_key(self.private_path)

    def environment(self) -> dict[str, str]:
        return {
            "KILN_JWT_JWKS": str(self.jwks_path),
            "KILN_JWT_PRIVATE_KEY": str(self.private_path),
            "KILN_JWT_KID": self.kid,
            "KILN_JWT_ISSUER": settings.KILN_JWT_ISSUER,
            "KILN_JWT_AUDIENCE": settings.KILN_JWT_AUDIENCE,
        }

    def sign(self, sub: str, roles: list[str], team: str | None = None) -> str:
        return tokens.issue(
            private_key=self._key, kid=self.kid, issuer=settings.KILN_JWT_ISSUER,
            audience=settings.KILN_JWT_AUDIENCE, sub=sub, roles=roles, team=team,
            ttl_seconds=4 * 3600,
        )  # fmt: skip


def free_port(span: int = 2) -> int:
    """A loopback port that binds now, with the `span - 1` above it binding too (the extender's
    is the web's + 1), from below Linux's ephemeral range (32768 and up), where outgoing
    connections take their ports."""
    starts = list(range(20000, 32000, span))
    random.shuffle(starts)
    for start in starts:
        if all(port_binds(start + i) for i in range(span)):
            return start
    raise RuntimeError(f"no {span} free loopback ports in a row in 20000-32000")


def port_binds(port: int) -> bool:
    """True if a socket can bind 127.0.0.1:`port` now."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
