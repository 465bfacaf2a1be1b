"""Waking the relay after commit: an in-process relay thread (standalone) or a Celery task.

The Celery task `audit.tasks.relay_outbox` is enqueued after a committed
transaction that recorded events, at most once while one is still waiting to
start: a wake-up claims a short-lived Redis key (SET NX) and the task releases
it before it reads the outbox, so every commit is followed by a relay run that
starts after it, and a burst of commits costs one task instead of one each.
Beat runs the same task every KILN_AUDIT_SWEEP_SECONDS, and the writer sweeps
too, so an event whose wake-up was lost (broker down) is published by the next
sweep.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connection

from audit.topic import TopicUnavailable

log = logging.getLogger("kiln.audit.relay")

# A queued wake-up that never started (worker gone) stops suppressing new ones after this.
WAKE_CLAIM_MS = 5000

_wake = threading.Event()
_inprocess = threading.Event()  # set while the in-process relay thread runs


def wake() -> None:
    """Ask the relay to publish now (never raises: the sweep is the safety net)."""
    if _inprocess.is_set():
        _wake.set()
        return
    if not settings.KILN_AUDIT_RELAY_ON_COMMIT or not _claim_wake():
        return
    try:
        from audit.tasks import relay_outbox

        relay_outbox.apply_async(retry=False)
    except Exception as exc:  # noqa: BLE001 - broker down: the periodic sweep publishes later
        log.warning("audit relay wake-up not enqueued (%s); the sweep will publish", exc)


def _wake_key() -> str:
    return f"{settings.KILN_AUDIT_STREAM}:relay-wake"


def _redis():
    global _client, _client_url
    import redis

    if _client is None or _client_url != settings.REDIS_URL:
        _client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
        )
        _client_url = settings.REDIS_URL
    return _client


_client = None
_client_url: str | None = None


def _claim_wake() -> bool:
    """True unless a relay run is already queued and not yet started (it will see this commit)."""
    if not settings.REDIS_URL:
        return True
    try:
        return bool(_redis().set(_wake_key(), b"1", nx=True, px=WAKE_CLAIM_MS))
    except Exception:  # noqa: BLE001 - Redis trouble: enqueue anyway, the broker decides
        return True


def release_wake() -> None:
    """Called by the relay task before it reads the outbox: later commits queue a new run."""
    if not settings.REDIS_URL:
        return
    try:
        _redis().delete(_wake_key())
    except Exception as exc:  # noqa: BLE001 - the claim expires by itself
        log.warning("audit relay wake-up claim not released (%s)", exc)


def run_inprocess(stop: threading.Event) -> None:
    """The relay loop of standalone mode: publish on wake-up or every sweep interval."""
    from audit.services import relay_publish

    _inprocess.set()
    _wake.set()  # publish at once on start
    first = True  # the in-process stream starts empty: what was published before a restart is gone
    try:
        while not stop.is_set():
            _wake.wait(settings.KILN_AUDIT_SWEEP_SECONDS)
            _wake.clear()
            if stop.is_set():
                break
            try:
                relay_publish(republish_all=first)
                first = False
            except TopicUnavailable as exc:
                log.warning("audit topic unavailable: %s", exc)
            except Exception:  # noqa: BLE001 - keep relaying; the error is logged with its trace
                log.exception("audit relay failed; retrying at the next sweep")
    finally:
        _inprocess.clear()
        connection.close()


def stop_inprocess() -> None:
    """Unblock the relay loop so it notices its stop event."""
    _wake.set()
