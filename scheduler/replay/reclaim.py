"""The replay's workloads over capacity pools, and the reclaim study: one spot pool taken back at a time.

A workload of the trace is a job; its replicas at a moment are its tasks running then.
`Workloads` counts each job's running tasks and its spot tasks per capacity pool (machine
shape x zone x capacity type, `Cluster.set_pools`), which both the spread filter
(`blocked`) and the study read.

The spread filter (`pools.max_per_pool`): a task of a job with r = running + 1 >= 2
replicas (its running tasks and itself) may not go to a spot machine whose capacity pool
already holds ceil(r / k) of the job's spot tasks.

The study (`ReclaimStudy.sample`), at every trace hour: for each spot capacity pool in turn,
what reclaiming every machine of that pool would do at that moment, without doing it:

  wiped   = jobs with >= 2 running tasks, every one of them on that pool's machines
  moved   = running tasks on that pool's machines (all must be placed again)

summed over the pools and hours (`workloads_wiped_out`, `replicas_moved`), with the worst
single reclaim beside them. On-demand pools are not reclaimed.
"""

from __future__ import annotations

import math

import numpy as np

from scheduler.replay.trace import TASK_INDEX_BITS

US_PER_HOUR = 3_600_000_000


def job_of(key: int) -> int:
    """The job id of a task key (`job_id << TASK_INDEX_BITS | task_index`)."""
    return key >> TASK_INDEX_BITS


class Workloads:
    """Running tasks per job and spot tasks per job and capacity pool."""

    def __init__(self, pool_count: int) -> None:
        self.pool_count = pool_count
        self.running: dict[int, int] = {}
        self.spot: dict[int, np.ndarray] = {}

    def placed(self, job: int, pool: int, spot: bool) -> None:
        """A task of `job` started on a machine of `pool`."""
        self.running[job] = self.running.get(job, 0) + 1
        if spot:
            counts = self.spot.get(job)
            if counts is None:
                counts = self.spot[job] = np.zeros(self.pool_count, dtype=np.int32)
            counts[pool] += 1

    def freed(self, job: int, pool: int, spot: bool) -> None:
        """A task of `job` on a machine of `pool` ended (finished, killed, evicted, reclaimed)."""
        left = self.running.get(job, 0) - 1
        if left > 0:
            self.running[job] = left
        else:
            self.running.pop(job, None)
            self.spot.pop(job, None)
            return
        if spot:
            counts = self.spot.get(job)
            if counts is not None:
                counts[pool] -= 1

    def blocked(self, job: int, k: int) -> np.ndarray | None:
        """Per pool, whether it holds ceil(r / k) of the job's spot tasks (r = running + 1);
        None when nothing is blocked (a job of one, or no pool full)."""
        counts = self.spot.get(job)
        if counts is None:
            return None
        r = self.running.get(job, 0) + 1
        if r < 2:
            return None
        full = counts >= max(1, math.ceil(r / k))
        return full if full.any() else None


class ReclaimStudy:
    """Every trace hour, each spot capacity pool reclaimed in turn (see the module docstring)."""

    def __init__(self, start_us: int, spot_pools: np.ndarray) -> None:
        self.next_us = start_us + US_PER_HOUR
        self.spot_pools = spot_pools  # bool per pool
        self.moments = 0
        self.reclaims = 0
        self.wiped = 0
        self.moved = 0
        self.worst_wiped = 0
        self.worst_moved = 0
        self.multi_replica = 0  # jobs with >= 2 running tasks, summed over moments

    def sample_until(self, t: int, workloads: Workloads, pool_tasks: np.ndarray) -> None:
        """Sample each trace hour boundary passed before t (the cluster is the same at each)."""
        while self.next_us < t:
            self.sample(workloads, pool_tasks)
            self.next_us += US_PER_HOUR

    def sample(self, workloads: Workloads, pool_tasks: np.ndarray) -> None:
        """One moment: for each spot pool, the jobs it would wipe out and the tasks it would move."""
        wiped = np.zeros(len(self.spot_pools), dtype=np.int64)
        multi = 0
        for job, running in workloads.running.items():
            if running < 2:
                continue
            multi += 1
            counts = workloads.spot.get(job)
            if counts is None:
                continue
            top = int(counts.argmax())
            if counts[top] == running:
                wiped[top] += 1
        wiped = wiped[self.spot_pools]
        moved = pool_tasks[self.spot_pools]
        self.moments += 1
        self.reclaims += int(self.spot_pools.sum())
        self.multi_replica += multi
        self.wiped += int(wiped.sum())
        self.moved += int(moved.sum())
        self.worst_wiped = max(self.worst_wiped, int(wiped.max(initial=0)))
        self.worst_moved = max(self.worst_moved, int(moved.max(initial=0)))

    def as_dict(self) -> dict:
        """The study's figures for one run."""
        return {
            "moments": self.moments,
            "spot_pools": int(self.spot_pools.sum()),
            "reclaims": self.reclaims,
            "multi_replica_workloads": self.multi_replica,
            "workloads_wiped_out": self.wiped,
            "worst_single_reclaim_wiped_out": self.worst_wiped,
            "replicas_moved": self.moved,
            "worst_single_reclaim_moved": self.worst_moved,
        }


# How far placements and spot placements may fall below Kiln's without the spread filter.
TOLERANCE = 0.05


def study_figures(run: dict) -> dict:
    """The study's figures of one run (`RunResult.as_dict()`)."""
    study = run.get("reclaim_study") or {}
    return {
        "workloads_wiped_out": study.get("workloads_wiped_out", 0),
        "worst_single_reclaim_wiped_out": study.get("worst_single_reclaim_wiped_out", 0),
        "replicas_moved": study.get("replicas_moved", 0),
        "worst_single_reclaim_moved": study.get("worst_single_reclaim_moved", 0),
        "multi_replica_workloads": study.get("multi_replica_workloads", 0),
        "reclaims": study.get("reclaims", 0),
        "moments": study.get("moments", 0),
        "placements": run["placements"],
        "spot_placements": run["spot_placements"],
        "unschedulable": run["unschedulable"],
        "latency_on_spot": run["latency_on_spot"],
        "cost": run["cost"],
        "spread_k": run.get("spread_k"),
        "capacity_pools": run.get("capacity_pools", 0),
    }


def within(run: dict, baseline: dict, tolerance: float = TOLERANCE) -> bool:
    """Placements and spot placements at least (1 - tolerance) of the baseline's."""
    return all(
        run[key] >= (1.0 - tolerance) * baseline[key] for key in ("placements", "spot_placements")
    )


def choose_k(candidates: dict[int, dict], baseline: dict) -> tuple[int, str]:
    """The most protective k whose placements and spot use stay within 5% of the baseline (Kiln
    without the filter): fewest workloads wiped out, then the largest k; if none stays within,
    the k wiping out fewest (the smaller on a tie).

    A larger k is never less protective (ceil(r / k) only falls), and at k >= r every spot
    replica of a workload sits in a pool of its own, so no single reclaim can take all of two
    or more; what a larger k costs is spot placements, which the 5% bound holds."""
    fit = [k for k in sorted(candidates) if within(candidates[k], baseline)]
    if fit:
        best = min(fit, key=lambda k: (candidates[k]["workloads_wiped_out"], -k))
        return best, "fewest workloads wiped out, then the largest k, within 5% of placements, spot"
    best = min(sorted(candidates), key=lambda k: candidates[k]["workloads_wiped_out"])
    return best, "no k stayed within 5% on the choosing parts: the k wiping out fewest"
