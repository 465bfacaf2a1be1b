"""Workload Commitment at `/metrics`: a Prometheus collector over the newest stored sample.

The figures are read from the database when Prometheus scrapes, not kept in process
memory, so every process (web, worker) exports the same values: those of the last node
sync that moved them (`CommitmentSample`). Before the first sync nothing is exported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scheduler.models import CommitmentSample

log = logging.getLogger("kiln.scheduler.metrics")

# (metric suffix, key in the sample's per-resource figures, help)
FIGURES = (
    ("ratio", "ratio", "Scheduled pod requests (DaemonSets excluded) / provisioned node capacity"),
    ("committed", "committed", "Scheduled pod requests counted by Workload Commitment"),
    ("capacity", "capacity", "Provisioned node capacity (allocatable)"),
    ("pending", "pending", "Requests of pods bound to no node (beside the ratio, never in it)"),
    ("pending_ratio", "pending_ratio", "Pending requests / provisioned node capacity"),
    ("stranded", "stranded", "Free capacity on nodes committed >= 0.9 on another resource"),
)


class CommitmentCollector(Collector):
    """Exports `kiln_workload_commitment_*{resource}` and the per-node spread from the last sample."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            sample = CommitmentSample.objects.order_by("-taken_at").first()
        except DatabaseError:  # a scrape must answer even while the database is away
            log.warning("workload commitment not exported: database unavailable")
            return
        if sample is None:
            return
        resources = sample.figures.get("resources", {})
        for suffix, key, text in FIGURES:
            family = GaugeMetricFamily(
                f"kiln_workload_commitment_{suffix}", text, labels=["resource"]
            )
            for resource, figure in sorted(resources.items()):
                if figure.get(key) is not None:
                    family.add_metric([resource], float(figure[key]))
            yield family
        spread = GaugeMetricFamily(
            "kiln_workload_commitment_node_ratio",
            "Spread of per-node Workload Commitment (min, p50, p90, max over nodes)",
            labels=["resource", "quantile"],
        )
        for resource, figure in sorted(resources.items()):
            for quantile, value in sorted((figure.get("spread") or {}).items()):
                if value is not None:
                    spread.add_metric([resource, quantile], float(value))
        yield spread
        pending = GaugeMetricFamily("kiln_workload_pending_pods", "Pods bound to no node")
        pending.add_metric([], float(sample.figures.get("pending_pods", 0)))
        yield pending
        nodes = GaugeMetricFamily("kiln_workload_commitment_nodes", "Nodes in the last sample")
        nodes.add_metric([], float(sample.nodes))
        yield nodes
        taken = GaugeMetricFamily(
            "kiln_workload_commitment_sample_timestamp_seconds", "When the last sample was taken"
        )
        taken.add_metric([], sample.taken_at.timestamp())
        yield taken

    def describe(self) -> list:
        # Empty: the registry must not call collect() (a database read) when registering.
        return []
