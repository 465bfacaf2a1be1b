"""The audit writer's lag as Prometheus figures, and the writer's liveness.

Exported by the audit writer's process only (kiln/metrics_server.py, port 9103), read when
scraped:

- `kiln_audit_outbox_events`: events recorded (outbox rows) and not yet chained;
- `kiln_audit_writer_lag_seconds`: the age of the oldest of them (0 when none waits);
- `kiln_audit_stream_pending_entries`: audit stream entries published and not yet acknowledged
  by the writer (absent while the stream cannot be read);
- `kiln_audit_chain_entries`: the chain's size (its head `seq`).

Liveness (`LagWatch`): a writer is not live once the lag is past
KILN_AUDIT_WRITER_LIVE_LAG_SECONDS and has grown since the previous probe. A writer that
chains, however far behind, removes the oldest rows and the lag falls; one that is stuck (a hung
connection, a lock never released) lets it grow with the clock, and a restart is what helps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from audit.chain.topic import TopicUnavailable, get_topic
from audit.selectors import writer_lag

log = logging.getLogger("kiln.audit.metrics")


class AuditLagCollector(Collector):
    """The writer's lag, read from the outbox, the chain and the stream when scraped."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Outbox rows waiting, the oldest one's age, the stream's backlog, the chain's size."""
        try:
            lag = writer_lag()
        except DatabaseError:  # a scrape must answer even while the database is away
            log.warning("audit writer lag not exported: database unavailable")
        else:
            for name, text, value in (
                (
                    "kiln_audit_outbox_events",
                    "Audit events recorded and not yet chained",
                    lag["pending"],
                ),
                (
                    "kiln_audit_writer_lag_seconds",
                    "Age of the oldest audit event recorded and not yet chained",
                    lag["lag_seconds"],
                ),
                (
                    "kiln_audit_chain_entries",
                    "Entries in the audit chain (its head seq)",
                    lag["head_seq"],
                ),
            ):
                family = GaugeMetricFamily(name, text)
                family.add_metric([], float(value))
                yield family
        try:
            backlog = get_topic().backlog()
        except TopicUnavailable:
            log.warning("audit stream backlog not exported: stream unavailable")
            return
        family = GaugeMetricFamily(
            "kiln_audit_stream_pending_entries",
            "Audit stream entries published and not yet acknowledged by the writer",
        )
        family.add_metric([], float(backlog))
        yield family

    def describe(self) -> list:
        """Nothing: registering must not read the database."""
        return []


class LagWatch:
    """The writer's liveness: not live when the lag is past `bound` and grew since the last probe."""

    def __init__(self, bound: float | None = None) -> None:
        self.bound = settings.KILN_AUDIT_WRITER_LIVE_LAG_SECONDS if bound is None else bound
        self._previous: float | None = None
        self._lock = threading.Lock()

    def judge(self, lag_seconds: float) -> bool:
        """Whether a writer with this lag now (after the previous probe's) is live."""
        with self._lock:
            previous, self._previous = self._previous, lag_seconds
        grew = previous is not None and lag_seconds > previous
        return not (lag_seconds > self.bound and grew)

    def check(self) -> dict[str, Any]:
        """A health check (kiln.health): the lag, its bound, and whether the writer is live."""
        lag = writer_lag()
        return {
            "ok": self.judge(lag["lag_seconds"]),
            "lag_seconds": lag["lag_seconds"],
            "bound_seconds": self.bound,
            "pending": lag["pending"],
        }
