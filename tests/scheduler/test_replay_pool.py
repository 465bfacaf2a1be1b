"""Parallel replay runs end when one fails, even if the parent process handles SIGTERM itself."""

from __future__ import annotations

import subprocess
import sys

from django.conf import settings

SCRIPT = """
import signal
from scheduler.replay import ReplayConfig, run_many

signal.signal(signal.SIGTERM, lambda *_: None)  # e.g. a server's graceful-stop handler
configs = [ReplayConfig(scheduler="nope", spot_fraction=0.1, start="empty")] * 4
try:
    list(run_many(object(), configs, workers=2))
except ValueError as exc:
    print("raised:", exc)
"""


def test_a_failing_parallel_run_raises_instead_of_hanging_the_pool():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("raised: scheduler must be one of"), out.stdout
