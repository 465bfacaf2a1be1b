"""Bounded waits for management commands and tests: poll until done, or fail naming what never
arrived; and a wait until a signalled process has really stopped.

A command that waits on another process (an audit writer chaining events, a worker finishing
rollouts) must not wait forever when that process cannot see its work (a misconfigured topic,
a dead worker): after `timeout` seconds, or as soon as the process it waits on has exited,
`wait_until` raises CommandError, so the command exits non-zero with the reason.
`wait_stopped` raises RuntimeError when a process sent SIGSTOP does not stop.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from django.core.management.base import CommandError


def wait_until(
    done: Callable[[], bool],
    *,
    timeout: float,
    what: Callable[[], str],
    poll: float = 0.05,
    gone: Callable[[], str | None] | None = None,
    stated_timeout: float | None = None,
) -> float:
    """Poll `done()` every `poll` seconds; return the seconds waited once it is true.

    `what()` describes what has not arrived (called only on failure, so it may count rows);
    `gone()` returns a reason when the awaited process is known dead, ending the wait early.
    `stated_timeout` is the --timeout the message names when `timeout` is what is left of it.
    """
    started = time.monotonic()
    deadline = started + max(timeout, 0.0)
    while not done():
        reason = gone() if gone is not None else None
        if reason:
            raise CommandError(f"{what()}: {reason}")
        if time.monotonic() >= deadline:
            stated = timeout if stated_timeout is None else stated_timeout
            raise CommandError(f"{what()} after {stated:g} s (--timeout); giving up")
        time.sleep(poll)
    return time.monotonic() - started


def process_gone(proc, name: str) -> Callable[[], str | None]:
    """A `gone` callback for a subprocess.Popen: the reason once it has exited."""

    def check() -> str | None:
        code = proc.poll()
        return None if code is None else f"the {name} exited with status {code}"

    return check


def thread_states(pid: int) -> list[str]:
    """The scheduler state of each thread of a process (`T` once stopped by a signal)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            # "tid (comm) S ...": the state follows the command name's closing parenthesis.
            states.append(stat.read_text().rpartition(")")[2].split()[0])
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
    return states


def wait_stopped(pid: int, timeout: float = 10.0) -> None:
    """Wait until every thread of `pid` is stopped; fail loudly past `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        states = thread_states(pid)
        if states and all(state in ("T", "t") for state in states):
            return
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGCONT)  # not left frozen: a SIGTERM and a wait would hang on it
            raise RuntimeError(f"process {pid} did not stop: thread states {states}")
        time.sleep(0.001)
