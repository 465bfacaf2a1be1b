"""Parallel replay runs end when one fails, even if the parent process handles SIGTERM itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from django.conf import settings

from scheduler.replay.sim import _worker_signals

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


def test_a_sigterm_that_reaches_a_worker_before_its_initializer_still_ends_it():
    """The race the pool had under load: Pool.terminate() signalled a freshly forked worker
    while it still carried the parent's handler, which swallowed SIGTERM, and terminate()
    waited for it forever. Workers are forked with SIGTERM blocked; the initializer unblocks it."""
    pid = os.fork()
    if pid == 0:  # the worker, as run_many forks it
        try:
            signal.signal(signal.SIGTERM, lambda *_: None)  # the parent's handler, inherited
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            os.kill(os.getpid(), signal.SIGTERM)  # terminate() comes before the initializer
            _worker_signals()
        finally:
            os._exit(0)  # reached only if the signal was swallowed
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
