"""Workload Commitment of a replayed cluster over trace time (scheduler/commitment.py's arithmetic).

Every `every_us` of trace time (an hour by default) from the window's start, the run's
cluster is sampled as it stands between events: capacity and requests of the machines
present (`Cluster.matrix` columns 0-2 and 3-5; the trace has no GPUs, so the GPU ratio
is undefined). The trace has no DaemonSets, so every placed task counts. It has no
pending queue either (a task that finds no machine is not retried): the pending demand
of a sample is the requests of the tasks that found no machine since the previous
sample, over the capacity present, reported beside the ratio.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduler import commitment

US_PER_HOUR = 3_600_000_000
TRACKED = ("cpu", "memory")


class CommitmentSeries:
    """Samples of one run: ratio, pending ratio, node p90 and stranded share per resource."""

    def __init__(self, start_us: int, every_us: int = US_PER_HOUR) -> None:
        self.start_us = start_us
        self.every_us = every_us
        self.next_us = start_us
        self.pending = np.zeros(len(commitment.RESOURCES))
        self.columns: dict[str, list[float | None]] = {"t_hours": []}
        for r in TRACKED:
            for key in ("", "_pending", "_p90", "_stranded"):
                self.columns[f"{r}{key}"] = []

    def add_pending(self, cpu: float, mem: float) -> None:
        """A task found no machine: its requests are pending demand of the next sample."""
        self.pending[0] += cpu
        self.pending[1] += mem

    def sample_until(self, t_us: int, matrix: np.ndarray, active: np.ndarray) -> None:
        """Record every sample time before t_us with the cluster as it stands (between events)."""
        if t_us <= self.next_us:
            return
        rows = matrix[active]
        figures = commitment.cluster_figures(rows[:, 0:3], rows[:, 3:6], self.pending)
        self.pending = np.zeros(len(commitment.RESOURCES))
        pending_share = {f.resource: f.pending_ratio for f in figures}
        while self.next_us < t_us:
            self.columns["t_hours"].append(round((self.next_us - self.start_us) / US_PER_HOUR, 3))
            for f in figures:
                if f.resource not in TRACKED:
                    continue
                self.columns[f.resource].append(_r(f.ratio))
                self.columns[f"{f.resource}_pending"].append(_r(pending_share[f.resource]))
                self.columns[f"{f.resource}_p90"].append(_r(f.spread.p90))
                share = f.stranded / f.capacity if f.capacity else None
                self.columns[f"{f.resource}_stranded"].append(_r(share))
            pending_share = dict.fromkeys(pending_share, 0.0)  # only the first sample had them
            self.next_us += self.every_us

    def as_dict(self) -> dict[str, Any]:
        """The series and its summary (mean, min, max of each column over the samples)."""
        summary = {}
        for key, values in self.columns.items():
            present = [v for v in values if v is not None]
            if key == "t_hours" or not present:
                continue
            summary[key] = {
                "mean": round(float(np.mean(present)), 6),
                "min": min(present),
                "max": max(present),
            }
        return {
            "sample_hours": self.every_us / US_PER_HOUR,
            "samples": len(self.columns["t_hours"]),
            "summary": summary,
            "series": self.columns,
        }


def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)
