"""How the audit relay and writer run inside other processes: standalone threads, readiness."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings
from django.db import connection

from audit.chain import relay
from audit.chain.topic import TopicUnavailable
from audit.chain.writer import AuditWriter
from audit.selectors import writer_lag
from audit.services import relay_publish
from kiln.standalone import Service

log = logging.getLogger("kiln.audit.relay")


def relay_loop(stop: threading.Event) -> None:
    """The relay loop of standalone mode: publish at once, then on each wake-up or sweep."""
    relay.inprocess_started()
    first = True  # the in-process stream starts empty: what was published before a restart is gone
    try:
        while not stop.is_set():
            try:
                relay_publish(republish_all=first)
                first = False
            except TopicUnavailable as exc:
                log.warning("audit topic unavailable: %s", exc)
            except Exception:  # noqa: BLE001 - keep relaying; the error is logged with its trace
                log.exception("audit relay failed; retrying at the next sweep")
            relay.wait_inprocess(settings.KILN_AUDIT_SWEEP_SECONDS)
    finally:
        relay.inprocess_stopped()
        connection.close()


def relay_service() -> Service:
    """The in-process relay thread of standalone mode."""
    stop = threading.Event()
    thread = threading.Thread(target=relay_loop, args=(stop,), name="audit-relay", daemon=True)

    def halt() -> None:
        stop.set()
        relay.stop_inprocess()
        thread.join(timeout=10)

    return Service("audit relay (in-process)", thread.start, halt)


def writer_service() -> Service:
    """The in-process audit writer thread of standalone mode (same code as `audit_writer`)."""
    stop = threading.Event()

    def run() -> None:
        AuditWriter(block_ms=500).run(stop)

    thread = threading.Thread(target=run, name="audit-writer", daemon=True)

    def halt() -> None:
        stop.set()
        thread.join(timeout=10)

    return Service("audit writer (in-process)", thread.start, halt)


def writer_lag_check() -> dict[str, Any]:
    """Readiness: events recorded but not yet chained, and the age of the oldest."""
    lag = writer_lag()
    return {
        "ok": lag["lag_seconds"] <= settings.KILN_AUDIT_MAX_LAG_SECONDS,
        "pending": lag["pending"],
        "lag_seconds": lag["lag_seconds"],
        "head_seq": lag["head_seq"],
    }
