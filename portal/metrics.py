"""The reaper's backlog at `/metrics`: environments past their TTL that are not gone yet.

Read when beat's process is scraped (kiln/metrics_server.py, port 9102; beat schedules the
reaper and runs once, so each figure is exported once): `kiln_portal_reaper_backlog_environments
{status}` counts the environments whose TTL expired and that are still live, by status (READY:
not yet picked up or deferred; EXPIRING and TEARING_DOWN: on their way; QUARANTINED: waiting
for their owner), and `kiln_portal_reaper_backlog_oldest_seconds` is how long ago the oldest
of them expired. Quarantines themselves are counted where they happen
(`kiln_portal_quarantines_total{env_class}`, portal/services/teardown.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.db import DatabaseError
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from portal.lifecycle import LIVE
from portal.models import Environment

log = logging.getLogger("kiln.portal.metrics")


class ReaperBacklogCollector(Collector):
    """Expired environments not yet torn down, by status, and the oldest one's overdue time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Read the backlog now; nothing while the database is away."""
        now = timezone.now()
        try:
            expired = Environment.objects.filter(expires_at__lte=now, status__in=sorted(LIVE))
            rows = list(expired.values("status").annotate(n=Count("id"), oldest=Min("expires_at")))
        except DatabaseError:
            log.warning("reaper backlog not exported: database unavailable")
            return
        backlog = GaugeMetricFamily(
            "kiln_portal_reaper_backlog_environments",
            "Environments past their TTL and not torn down yet, by status",
            labels=["status"],
        )
        for row in sorted(rows, key=lambda r: r["status"]):
            backlog.add_metric([row["status"]], float(row["n"]))
        yield backlog
        oldest = min((r["oldest"] for r in rows), default=None)
        family = GaugeMetricFamily(
            "kiln_portal_reaper_backlog_oldest_seconds",
            "How long ago the longest-expired environment not yet torn down expired (0: none)",
        )
        family.add_metric([], max((now - oldest).total_seconds(), 0.0) if oldest else 0.0)
        yield family

    def describe(self) -> list:
        """Nothing: registering must not read the database."""
        return []
