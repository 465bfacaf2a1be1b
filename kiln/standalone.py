"""Standalone mode's in-process services: a Celery worker and beat on the memory transport.

The worker runs the same tasks as production (`celery -A kiln worker`), in a
thread pool inside the web process; beat runs the same schedule. Other
in-process services (the audit relay and writer) register with `add_service`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from celery.beat import EmbeddedService
from django.conf import settings
from django.core.management.base import CommandError

from kiln.celery import app

log = logging.getLogger("kiln.standalone")


@dataclass
class Service:
    """A background service: `start()` returns once it runs; `stop()` asks it to end and waits."""

    name: str
    start: Callable[[], None]
    stop: Callable[[], None]


@dataclass
class Runtime:
    services: list[Service] = field(default_factory=list)

    def start(self) -> None:
        for service in self.services:
            service.start()
            log.info("started %s", service.name)

    def stop(self) -> None:
        for service in reversed(self.services):
            started = time.monotonic()
            try:
                service.stop()
            except Exception:  # noqa: BLE001 - keep stopping the others, but say so
                log.exception("stopping %s failed", service.name)
            else:
                log.info("stopped %s in %.2f s", service.name, time.monotonic() - started)


_extra: list[Callable[[], Service]] = []


def add_service(factory: Callable[[], Service]) -> None:
    """Register a factory for an extra in-process service (called from AppConfig.ready())."""
    _extra.append(factory)


def celery_worker_service(concurrency: int = 4) -> Service:
    app.conf.broker_transport_options = {"polling_interval": 0.1}
    worker = app.WorkController(
        pool_cls="threads",
        concurrency=concurrency,
        loglevel=settings.LOG_LEVEL,
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        hostname="standalone@kiln",
    )
    thread = threading.Thread(target=worker.start, name="celery-worker", daemon=True)

    def stop() -> None:
        worker.stop(in_sighandler=False)
        thread.join(timeout=10)

    return Service("celery worker (threads, memory transport)", thread.start, stop)


def celery_beat_service() -> Service:
    beat = EmbeddedService(
        app, thread=True, schedule_filename=str(settings.VAR_DIR / "celerybeat-schedule")
    )
    return Service("celery beat", beat.start, beat.stop)


def prefork_worker_service(
    name: str, concurrency: int, environment: dict[str, str], loglevel: str = "WARNING"
) -> Service:
    """A separate `celery -A kiln worker --pool prefork` process, as `make dev` runs it (benchmarks)."""
    hostname = f"{name}-{os.getpid()}@{socket.gethostname()}"
    log_file = tempfile.NamedTemporaryFile(prefix=f"{name}-worker-", suffix=".log", delete=False)
    command = [
        str(Path(sys.executable).with_name("celery")),
        "-A",
        "kiln",
        "worker",
        "--pool",
        "prefork",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        loglevel,
        "--without-heartbeat",
        "--without-mingle",
        "--without-gossip",
        "--hostname",
        hostname,
    ]
    process: list[subprocess.Popen] = []

    def start() -> None:
        process.append(
            subprocess.Popen(
                command,
                env={**os.environ, **environment},
                cwd=settings.BASE_DIR,
                stdout=log_file,
                stderr=log_file,
            )
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            if process[0].poll() is not None:
                raise CommandError(f"the bench worker exited; see {log_file.name}")
            if app.control.ping(destination=[hostname], timeout=0.5):
                return
        stop()
        raise CommandError(f"the bench worker did not start; see {log_file.name}")

    def stop() -> None:
        if not process:
            return
        process[0].send_signal(signal.SIGTERM)  # warm shutdown: running tasks finish
        try:
            process[0].wait(timeout=30)
        except subprocess.TimeoutExpired:
            process[0].kill()
            process[0].wait()
        Path(log_file.name).unlink(missing_ok=True)

    return Service(f"celery worker (prefork x{concurrency})", start, stop)


def audit_writer_service(name: str, environment: dict[str, str] | None = None) -> Service:
    """`manage.py audit_writer` as its own process, as `make dev` runs it (benchmarks): events
    reach the chain, and the outbox does not grow behind a bench that runs no writer."""
    process: list[subprocess.Popen] = []

    def start() -> None:
        process.append(
            subprocess.Popen(
                [sys.executable, "manage.py", "audit_writer", "--consumer", name],
                cwd=settings.BASE_DIR,
                env={**os.environ, **(environment or {})},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    def stop() -> None:
        if process:
            process[0].send_signal(signal.SIGTERM)
            try:
                process[0].wait(timeout=30)
            except subprocess.TimeoutExpired:
                process[0].kill()
                process[0].wait()

    return Service(f"audit_writer ({name})", start, stop)


def services_together(*services: Service) -> Service:
    """One service that starts these in order and stops them in reverse order. If one fails to
    start, those already started are stopped before the error goes on: the caller stops only
    what started, and a process left behind would go on writing to the database."""

    def start() -> None:
        started: list[Service] = []
        try:
            for service in services:
                service.start()
                started.append(service)
        except BaseException:
            for service in reversed(started):
                service.stop()
            raise

    def stop() -> None:
        for service in reversed(services):
            service.stop()

    return Service(" and ".join(service.name for service in services), start, stop)


RUN_STARTED_VARIABLE = "KILN_RUN_STARTED"


class StageLines:
    """One line per start-up stage with the seconds since `make run` began.

    `make run` passes the moment it began (epoch seconds) in KILN_RUN_STARTED, so the
    installing stage it prints itself counts too; run directly, the clock starts here.
    """

    def __init__(self, write: Callable[[str], None], started: float | None = None) -> None:
        self.write = write
        if started is None:
            try:
                started = float(os.environ.get(RUN_STARTED_VARIABLE, ""))
            except ValueError:
                started = time.time()
        self.started = started

    def __call__(self, stage: str, detail: str) -> None:
        """Print `kiln   12.3 s  migrating   <detail>`."""
        elapsed = max(0.0, time.time() - self.started)
        self.write(f"kiln {elapsed:7.1f} s  {stage:<11} {detail}")


def build_runtime() -> Runtime:
    runtime = Runtime([celery_worker_service(), celery_beat_service()])
    runtime.services.extend(factory() for factory in _extra)
    return runtime
