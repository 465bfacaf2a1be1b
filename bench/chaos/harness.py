"""What the chaos benchmarks share (`chaos_crash_bench`, `chaos_lever_bench`): valid lease
timings scaled from one lease, a team and its namespace to aim faults at, and the independent
`manage.py chaos_reaper` process both run beside the controllers they start.

Child processes (the reaper, spawned controllers) see the same database as this one, the test
database under pytest, and the benchmark's timings through their environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from django.conf import settings
from django.core.management.base import CommandError
from django.db import transaction
from django.test.utils import override_settings

from audit import record
from bench.database import database_url
from kiln.identity.models import Team
from kiln.identity.permissions import system_actor

BENCH = system_actor("chaos-bench")


def bench_timings(lease: float) -> dict[str, float]:
    """Valid lease settings scaled from the lease (renew 50%, retry 10%, skew 10%, revert 15%)."""
    return {
        "KILN_CHAOS_LEASE_DURATION": lease,
        "KILN_CHAOS_RENEW_DEADLINE": round(lease * 0.5, 3),
        "KILN_CHAOS_RETRY_PERIOD": round(lease * 0.1, 3),
        "KILN_CHAOS_MAX_CLOCK_SKEW": round(lease * 0.1, 3),
        "KILN_CHAOS_REVERT_BUDGET": round(lease * 0.15, 3),
    }


def ensure_team(slug: str, name: str) -> None:
    """The benchmark's team `slug` (idempotent; its creation audited)."""
    with transaction.atomic():
        team, created = Team.objects.get_or_create(slug=slug, defaults={"name": name})
        if created:
            record(BENCH, "portal.team.created", team, {"slug": slug})


def team_namespace(name: str, team: str) -> dict[str, Any]:
    """A Namespace manifest labelled as `team`'s, for the cluster to hold the targets."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kiln.dev/team": team}},
    }


def child_env() -> dict[str, str]:
    """Environment for child processes: the same database (the test database under pytest)."""
    env = dict(os.environ)
    url = database_url()
    if url is not None:
        env["DATABASE_URL"] = url
    env.setdefault("SECRET_KEY", settings.SECRET_KEY)
    env["KILN_CHAOS_AUTORUN"] = "0"
    return env


def start_reaper(period: float, *, ready_timeout: float = 60.0) -> subprocess.Popen:
    """Start `manage.py chaos_reaper --period P` as its own process; return once it made a pass."""
    manage = os.path.join(settings.BASE_DIR, "manage.py")
    fd, ready = tempfile.mkstemp(prefix="chaos-reaper-", suffix=".ready")
    os.close(fd)
    os.unlink(ready)
    proc = subprocess.Popen(
        [sys.executable, manage, "chaos_reaper", "--period", str(period), "--ready-file", ready],
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + ready_timeout
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise CommandError("the chaos reaper process did not start")
        time.sleep(0.05)
    os.unlink(ready)
    return proc


def stop_process(proc: subprocess.Popen) -> None:
    """Terminate a child we started and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def reaper_running(*, lease: float, reaper_period: float) -> Iterator[subprocess.Popen]:
    """For the block: the timings scaled from `lease` in the settings and in the environment
    children inherit, controllers left to the benchmark (no autorun), and the reaper process
    running every `reaper_period` seconds."""
    timings = bench_timings(lease)
    with (
        mock.patch.dict(os.environ, {k: str(v) for k, v in timings.items()}),
        override_settings(KILN_CHAOS_AUTORUN=False, **timings),
    ):
        reaper = start_reaper(reaper_period)
        try:
            yield reaper
        finally:
            stop_process(reaper)
