"""How the audit relay and writer run inside other processes: standalone threads, readiness."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings

from kiln.standalone import Service


def relay_service() -> Service:
    """The in-process relay thread of standalone mode."""
    from audit import relay

    stop = threading.Event()
    thread = threading.Thread(
        target=relay.run_inprocess, args=(stop,), name="audit-relay", daemon=True
    )

    def halt() -> None:
        stop.set()
        relay.stop_inprocess()
        thread.join(timeout=10)

    return Service("audit relay (in-process)", thread.start, halt)


def writer_service() -> Service:
    """The in-process audit writer thread of standalone mode (same code as `audit_writer`)."""
    from audit.writer import AuditWriter

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
    from audit.selectors import writer_lag

    lag = writer_lag()
    return {
        "ok": lag["lag_seconds"] <= settings.KILN_AUDIT_MAX_LAG_SECONDS,
        "pending": lag["pending"],
        "lag_seconds": lag["lag_seconds"],
        "head_seq": lag["head_seq"],
    }
