"""A real Prometheus server on loopback for tests and benchmarks (Debian's `prometheus` package).

`PrometheusServer` writes a scrape configuration and a storage directory of its own
under a temporary directory, starts `/usr/bin/prometheus` on a free loopback port with
`--web.enable-lifecycle` (and `--enable-feature=native-histograms` when asked), waits
until `/-/ready` answers, and stops, restarts or reloads it. `backfill` writes history
with exact timestamps through `promtool tsdb create-blocks-from openmetrics`, so a
benchmark can lay down hours of scrapes without waiting for them in real time.

Nothing here is product code: it ships with the development requirements only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.waiting import wait_stopped

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
READY_TIMEOUT = 30.0


def scrape_epoch(stamp: str) -> float | None:
    """Seconds since the epoch of a target's `lastScrape` (RFC 3339, nanoseconds); None if never."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp)
    if not match or stamp.startswith("0001"):
        return None
    whole, fraction, zone = match.groups()
    moment = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return moment.timestamp() + float("0." + (fraction or "0"))


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrometheusServer:
    """One Prometheus process scraping `targets` (host:port strings) every `scrape_interval` seconds."""

    def __init__(
        self,
        *,
        targets: Iterable[str] = (),
        scrape_interval: float = 5.0,
        native_histograms: bool = False,
        query_timeout: float = 10.0,
        retention: str = "30d",
        binary: str = PROMETHEUS,
        workdir: str | Path | None = None,
        port: int | None = None,
    ) -> None:
        """Configure, but do not start, a server; `workdir` defaults to a fresh temporary directory.

        `port`: listen there (a fixed address for `make dev`); None picks a free one.
        """
        if not Path(binary).exists():
            raise FileNotFoundError(
                f"{binary} is missing: install Debian's prometheus package (make prometheus-tools)"
            )
        self.binary = binary
        self.targets = list(targets)
        self.scrape_interval = float(scrape_interval)
        self.native_histograms = native_histograms
        self.query_timeout = query_timeout
        self.retention = retention
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kiln-prometheus-"))
        self.storage = self.workdir / "data"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / "prometheus.yml"
        self.log_path = self.workdir / "prometheus.log"
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        self._write_config()

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        # JSON is YAML: no YAML writer needed. One job; every target scraped at the same interval.
        interval = f"{self.scrape_interval:g}s"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": "istio-mesh",
                    "scrape_interval": interval,
                    "scrape_timeout": f"{min(self.scrape_interval, 10.0):g}s",
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }
        self.config_path.write_text(json.dumps(config, indent=2))

    def command(self) -> list[str]:
        """The server's command line."""
        cmd = [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.storage}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            f"--query.timeout={self.query_timeout:g}s",
            "--log.level=warn",
        ]
        if self.native_histograms:
            cmd.append("--enable-feature=native-histograms")
        return cmd

    def start(self) -> PrometheusServer:
        """Start the process and wait until it is ready (RuntimeError with its log if it never is)."""
        if self.running:
            return self
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(  # noqa: S603 - a fixed binary and our own arguments
            self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
        )
        log.close()
        self.wait_ready()
        self.wait_targets()
        return self

    def wait_targets(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until every configured target is listed among the active ones (not yet scraped)."""
        deadline = time.monotonic() + timeout
        while set(self.targets) - set(self.last_scrapes()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"targets never became active: {self.log_tail()}")
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        """True while the process lives."""
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Poll /-/ready until it answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as response:  # noqa: S310
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus did not become ready: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s); storage is kept."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): it holds its port but answers nothing, as a hung server does.

        Returns once every thread of it has stopped: the signal is delivered asynchronously, and
        just after `kill` returns some thread of the server is often still running."""
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)
            wait_stopped(self.process.pid)

    def resume(self) -> None:
        """Thaw a paused process (SIGCONT)."""
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)

    def restart(self) -> PrometheusServer:
        """Stop and start again on the same port and storage."""
        self.stop()
        return self.start()

    def set_targets(self, targets: Iterable[str]) -> None:
        """Scrape these targets from now on (the configuration is rewritten and reloaded)."""
        self.targets = list(targets)
        self._write_config()
        if self.running:
            self.reload()

    def reload(self) -> None:
        """POST /-/reload: the server rereads its configuration."""
        request = urllib.request.Request(self.url + "/-/reload", method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            if response.status != 200:
                raise RuntimeError(f"reload answered {response.status}")

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path> with `params`; the `data` of a successful answer."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310
            body = json.loads(response.read().decode())
        if body.get("status") != "success":
            raise RuntimeError(f"{path}: {body.get('error')}")
        return body["data"]

    def version(self) -> str:
        """The server's version, as /api/v1/status/buildinfo reports it."""
        return str(self.api("status/buildinfo").get("version", ""))

    def wait_scrapes(
        self, count: int = 1, timeout: float | None = None, *, healthy: bool = True
    ) -> None:
        """Wait until every target has been scraped `count` times since this call.

        A scrape counts once its samples can be queried: each scrape writes `up` in the same
        commit as the samples it read, while /api/v1/targets names the scrape a moment before
        that commit. Unless `healthy` is False, only scrapes that read their target (`up` 1)
        count: a scrape that timed out on a busy machine wrote no samples.

        Only scrapes that *began* after the call count: a scrape that was under way when the
        call came may have read the target before the caller's last change, and its sample
        carries its start time, which may lie before a window the caller opens next.
        """
        since = time.time()
        timeout = timeout if timeout is not None else self.scrape_interval * (count + 2) + 5
        deadline = time.monotonic() + timeout
        last = self.scrape_stamps(healthy)
        seen = dict.fromkeys(self.targets, 0)
        while time.monotonic() < deadline:
            now = self.scrape_stamps(healthy)
            for target in self.targets:
                began = now.get(target)
                if began is not None and began != last.get(target) and began >= since:
                    seen[target] += 1
            last = now
            if all(n >= count for n in seen.values()):
                return
            time.sleep(0.1)
        kind = " healthily" if healthy else ""
        raise TimeoutError(f"targets not scraped{kind} {count} more times within {timeout:g}s")

    def scrape_stamps(self, healthy: bool = True) -> dict[str, float]:
        """Per target, the start time of its last committed scrape (healthy ones only if asked).

        Read as `up`'s raw samples over the last minute, which carry their own timestamps.
        """
        stamps = {}
        for series in self.api("query", query="up[1m]")["result"]:
            samples = [(float(t), v) for t, v in series["values"] if not healthy or v == "1"]
            if samples:
                stamps[series["metric"].get("instance", "")] = samples[-1][0]
        return stamps

    def last_scrapes(self) -> dict[str, str]:
        """Per target (host:port), the time of its last scrape as /api/v1/targets reports it."""
        data = self.api("targets", state="active")
        return {
            t.get("labels", {}).get("instance", ""): str(t.get("lastScrape", ""))
            for t in data.get("activeTargets", [])
        }

    def backfill(self, openmetrics: str) -> None:
        """Write `openmetrics` text (with timestamps, ending in `# EOF`) into storage as TSDB blocks.

        `promtool tsdb create-blocks-from openmetrics` builds the blocks in a scratch
        directory; they are moved into storage with the server stopped, and the server
        (if it was running) is started again so it loads them.
        """
        was_running = self.running
        scratch = Path(tempfile.mkdtemp(prefix="backfill-", dir=self.workdir))
        try:
            source = scratch / "history.om"
            source.write_text(openmetrics)
            out = scratch / "blocks"
            result = subprocess.run(  # noqa: S603 - a fixed binary and our own arguments
                [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(out)],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if result.returncode != 0:
                raise RuntimeError(f"promtool backfill failed: {result.stderr[-2000:]}")
            self.stop()
            for block in out.iterdir() if out.exists() else ():
                shutil.move(str(block), str(self.storage / block.name))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if was_running:
            self.start()

    def close(self) -> None:
        """Stop the server and remove a temporary work directory."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def prometheus_available() -> bool:
    """True if Debian's prometheus and promtool binaries are installed."""
    return os.access(PROMETHEUS, os.X_OK) and os.access(PROMTOOL, os.X_OK)
