"""The faults of the load runs, one per run, injected `at` seconds into the load:

- `worker`, `writer`, `extender`: SIGKILL of that process (the worker with its prefork pool),
  started again a second later, as a supervisor would;
- `web`: the web process restarted (SIGTERM, then started again);
- `redis`, `postgres`: the run's own Redis or PostgreSQL server restarted. These never touch the
  machine's shared servers: `manage.py loadtest --fault redis|postgres` starts a throwaway
  redis-server, and for `postgres` a throwaway cluster (initdb into a temporary directory), on
  ports of the run's range, and points every process at them (`OwnServers`).

`inject` records when the fault happened and how long until /readyz answered 200 again.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.shape import Shape, wait_for_port

KINDS = ("none", "worker", "writer", "web", "extender", "redis", "postgres")
PG_BIN = Path("/usr/lib/postgresql")


def inject(kind: str, shape: Shape, at: float, out: dict[str, Any]) -> None:
    """Wait `at` seconds, apply the fault, bring the process back; fill `out`."""
    if kind == "none":
        return
    time.sleep(at)
    out["kind"] = kind
    out["at"] = time.time()
    since = time.monotonic()
    if kind in ("worker", "writer", "extender"):
        shape.kill(kind, signal.SIGKILL)
        time.sleep(1.0)
        shape.start(kind)
    elif kind == "web":
        shape.kill("web", signal.SIGTERM)
        shape.start("web")
    else:
        OwnServers.from_environment().restart(kind)
    out["ready_seconds"] = round(shape.ready_after(timeout=120, since=since), 2)
    if kind == "extender":
        wait_for_port(shape.extender_port, timeout=60)
        out["extender_back_seconds"] = round(time.monotonic() - since, 2)
    out["recovered_at"] = time.time()


@dataclass
class OwnServers:
    """A throwaway redis-server (and PostgreSQL cluster) for the restart faults."""

    redis_port: int
    directory: Path
    postgres_port: int = 0

    @classmethod
    def from_environment(cls) -> OwnServers:
        return cls(
            redis_port=int(os.environ["KILN_LOAD_REDIS_PORT"]),
            directory=Path(os.environ["KILN_LOAD_SERVERS_DIR"]),
            postgres_port=int(os.environ.get("KILN_LOAD_POSTGRES_PORT", "0")),
        )

    def environment(self) -> dict[str, str]:
        """What points a process at these servers."""
        out = {
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "KILN_LOAD_REDIS_PORT": str(self.redis_port),
            "KILN_LOAD_SERVERS_DIR": str(self.directory),
        }
        if self.postgres_port:
            out["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:{self.postgres_port}/kiln_load"
            out["KILN_LOAD_POSTGRES_PORT"] = str(self.postgres_port)
        return out

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._redis_start()
        if self.postgres_port:
            self._postgres_init()
            self._pg_ctl("start")
            wait_for_port(self.postgres_port, timeout=60)
            subprocess.run(
                ["createdb", "-h", "127.0.0.1", "-p", str(self.postgres_port), "-U", "postgres",
                 "kiln_load"], check=True,
            )  # fmt: skip

    def stop(self) -> None:
        subprocess.run(
            ["redis-cli", "-p", str(self.redis_port), "shutdown", "nosave"], capture_output=True
        )
        if self.postgres_port:
            self._pg_ctl("stop", "-m", "fast")
        shutil.rmtree(self.directory, ignore_errors=True)

    def restart(self, kind: str) -> None:
        if kind == "redis":
            # SHUTDOWN writes the append-only file: a restart, not a loss of the broker's data.
            subprocess.run(["redis-cli", "-p", str(self.redis_port), "shutdown"], check=False)
            time.sleep(1.0)
            self._redis_start()
        else:
            self._pg_ctl("restart", "-m", "fast")
            wait_for_port(self.postgres_port, timeout=60)

    def _redis_start(self) -> None:
        subprocess.run(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
             "--daemonize", "yes", "--dir", str(self.directory), "--appendonly", "yes",
             "--appendfsync", "everysec", "--save", "", "--logfile",
             str(self.directory / "redis.log")], check=True,
        )  # fmt: skip
        wait_for_port(self.redis_port, timeout=30)

    def _pg_dir(self) -> Path:
        return self.directory / "pg"

    def _pg_ctl(self, *args: str) -> None:
        command = [str(self._bin("pg_ctl")), "-D", str(self._pg_dir()), "-w", *args]
        if args[0] in ("start", "restart"):
            command += ["-o", f"-p {self.postgres_port} -k {self.directory} -c fsync=off",
                        "-l", str(self.directory / "pg.log")]  # fmt: skip
        subprocess.run(self._as_postgres(command), check=True, capture_output=True)

    def _postgres_init(self) -> None:
        self.directory.chmod(0o777)  # the postgres user writes its socket and log here
        subprocess.run(
            self._as_postgres([str(self._bin("initdb")), "-D", str(self._pg_dir()), "-U",
                               "postgres", "--auth=trust", "-E", "UTF8"]),
            check=True, capture_output=True,
        )  # fmt: skip

    @staticmethod
    def _bin(name: str) -> Path:
        versions = sorted(PG_BIN.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0)
        return versions[-1] / "bin" / name

    @staticmethod
    def _as_postgres(command: list[str]) -> list[str]:
        # initdb and pg_ctl refuse to run as root.
        return command if os.geteuid() else ["runuser", "-u", "postgres", "--", *command]
