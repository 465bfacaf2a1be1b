"""Waking the relay after commit: an in-process relay thread (standalone) or a Celery task.

The Celery task `audit.tasks.relay_outbox` is enqueued once per committed
transaction that recorded events; beat runs the same task every
KILN_AUDIT_SWEEP_SECONDS, and the writer sweeps too, so an event whose wake-up
was lost (broker down) is published by the next sweep.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connection

from audit.topic import TopicUnavailable

log = logging.getLogger("kiln.audit.relay")

_wake = threading.Event()
_inprocess = threading.Event()  # set while the in-process relay thread runs


def wake() -> None:
    """Ask the relay to publish now (never raises: the sweep is the safety net)."""
    if _inprocess.is_set():
        _wake.set()
        return
    if not settings.KILN_AUDIT_RELAY_ON_COMMIT:
        return
    try:
        from audit.tasks import relay_outbox

        relay_outbox.apply_async(retry=False)
    except Exception as exc:  # noqa: BLE001 - broker down: the periodic sweep publishes later
        log.warning("audit relay wake-up not enqueued (%s); the sweep will publish", exc)


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
