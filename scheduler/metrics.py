"""Workload Commitment at `/metrics`: a Prometheus collector over the newest stored sample.

The figures are read from the database when Prometheus scrapes, not kept in process
memory, so every process (web, worker) exports the same values: those of the last node
sync that moved them (`CommitmentSample`). Before the first sync nothing is exported.

Names follow Prometheus conventions (`promtool check metrics`): the ratios carry a `resource`
label (they have no unit); amounts carry their base unit in their name, one name per resource
(`kiln_workload_commitment_committed_cpu_cores`, `..._memory_bytes`, `..._gpus`), the samples'
millicores divided into cores; the per-node spread's statistic is the label `statistic` (a
`quantile` label belongs to summaries only).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scheduler.models import CommitmentSample

log = logging.getLogger("kiln.scheduler.metrics")

# (metric suffix, key in the sample's per-resource figures, help): unitless, by `resource`
RATIOS = (
    ("ratio", "ratio", "Scheduled pod requests (DaemonSets excluded) / provisioned node capacity"),
    ("pending_ratio", "pending_ratio", "Pending requests / provisioned node capacity"),
)
# Amounts, one name per resource with its base unit
AMOUNTS = (
    ("committed", "committed", "Scheduled pod requests counted by Workload Commitment"),
    ("capacity", "capacity", "Provisioned node capacity (allocatable)"),
    ("pending", "pending", "Requests of pods bound to no node (beside the ratio, never in it)"),
    ("stranded", "stranded", "Free capacity on nodes committed >= 0.9 on another resource"),
)
# resource -> (unit suffix, factor from the sample's unit: millicores, bytes, GPUs)
UNITS = {"cpu": ("cpu_cores", 0.001), "memory": ("memory_bytes", 1.0), "gpu": ("gpus", 1.0)}


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
        for suffix, key, text in RATIOS:
            family = GaugeMetricFamily(
                f"kiln_workload_commitment_{suffix}", text, labels=["resource"]
            )
            for resource, figure in sorted(resources.items()):
                if figure.get(key) is not None:
                    family.add_metric([resource], float(figure[key]))
            yield family
        for suffix, key, text in AMOUNTS:
            for resource, figure in sorted(resources.items()):
                if resource not in UNITS or figure.get(key) is None:
                    continue
                unit, factor = UNITS[resource]
                family = GaugeMetricFamily(f"kiln_workload_commitment_{suffix}_{unit}", text)
                family.add_metric([], float(figure[key]) * factor)
                yield family
        spread = GaugeMetricFamily(
            "kiln_workload_commitment_node_ratio",
            "Spread of per-node Workload Commitment (min, p50, p90, max over nodes)",
            labels=["resource", "statistic"],
        )
        for resource, figure in sorted(resources.items()):
            for statistic, value in sorted((figure.get("spread") or {}).items()):
                if value is not None:
                    spread.add_metric([resource, statistic], float(value))
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
