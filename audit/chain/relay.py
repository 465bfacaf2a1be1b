"""Waking the relay after commit: an in-process relay thread (standalone) or a Celery task.

The Celery task `audit.tasks.relay_outbox` is enqueued after a committed
transaction that recorded events, at most once while one is still waiting to
start: a wake-up claims a short-lived Redis key (SET NX) and the task releases
it before it reads the outbox, so every commit is followed by a relay run that
starts after it, and a burst of commits costs one task instead of one each.
Beat runs the same task every KILN_AUDIT_SWEEP_SECONDS, and the writer sweeps
too, so an event whose wake-up was lost (broker down) is published by the next
sweep.

The task is enqueued by name (`send_task`): the task module calls the relay
service, which records nothing, and this module is imported by `record()`, so
naming the task keeps the recording path free of an import of the tasks.
"""

from __future__ import annotations

import functools
import logging
import threading

import redis
from django.conf import settings
from django.db import transaction

from kiln.celery import app
from kiln.worker_db import send_keeping_no_result

log = logging.getLogger("kiln.audit.relay")

RELAY_TASK = "audit.tasks.relay_outbox"
# A queued wake-up that never started (worker gone) stops suppressing new ones after this.
WAKE_CLAIM_MS = 5000

_wake = threading.Event()
_inprocess = threading.Event()  # set while the in-process relay thread runs


def wake_on_commit() -> None:
    """Wake the relay once the caller's transaction commits: one wake-up per transaction.

    A wake-up registered earlier in this transaction is still in the connection's
    commit hooks unless a savepoint rollback discarded it; then it is registered again.
    """
    hooks = transaction.get_connection().run_on_commit
    if not any(hook[1] is wake for hook in hooks):
        transaction.on_commit(wake)


def wake() -> None:
    """Ask the relay to publish now (never raises: the sweep is the safety net)."""
    if _inprocess.is_set():
        _wake.set()
        return
    if not settings.KILN_AUDIT_RELAY_ON_COMMIT or not _claim_wake():
        return
    try:
        send_keeping_no_result(app, RELAY_TASK, retry=False)
    except Exception as exc:  # noqa: BLE001 - broker down: the periodic sweep publishes later
        log.warning("audit relay wake-up not enqueued (%s); the sweep will publish", exc)


def _wake_key() -> str:
    return f"{settings.KILN_AUDIT_STREAM}:relay-wake"


@functools.cache
def _redis(url: str) -> redis.Redis:
    """One client per Redis URL (settings may change in tests)."""
    return redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)


def _claim_wake() -> bool:
    """True unless a relay run is already queued and not yet started (it will see this commit)."""
    if not settings.REDIS_URL:
        return True
    try:
        return bool(_redis(settings.REDIS_URL).set(_wake_key(), b"1", nx=True, px=WAKE_CLAIM_MS))
    except Exception:  # noqa: BLE001 - Redis trouble: enqueue anyway, the broker decides
        return True


def release_wake() -> None:
    """Called by the relay task before it reads the outbox: later commits queue a new run."""
    if not settings.REDIS_URL:
        return
    try:
        _redis(settings.REDIS_URL).delete(_wake_key())
    except Exception as exc:  # noqa: BLE001 - the claim expires by itself
        log.warning("audit relay wake-up claim not released (%s)", exc)


def inprocess_started() -> None:
    """The in-process relay loop runs (standalone): wake-ups go to it instead of Celery."""
    _inprocess.set()


def wait_inprocess(timeout: float) -> None:
    """The in-process relay loop waits here for a wake-up (or the sweep interval)."""
    _wake.wait(timeout)
    _wake.clear()


def inprocess_stopped() -> None:
    """The in-process relay loop ended: wake-ups go to Celery again."""
    _inprocess.clear()


def stop_inprocess() -> None:
    """Unblock the relay loop so it notices its stop event."""
    _wake.set()
