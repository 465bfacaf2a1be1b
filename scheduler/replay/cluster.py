"""The replayed cluster: per-machine arrays and kube-scheduler's placement loop over them.

`Cluster` holds one row per machine (`scoring.NodeArrays.COLUMNS`) plus free
capacity, updated incrementally, one element per event. `Placer` places a task
the way kube-scheduler does:

  1. sampling: starting where the previous pod stopped, walk the machines in
     order and keep the first `numFeasibleNodesToFind` that pass NodeResourcesFit
     (free cpu and memory >= request); the next pod starts after the last one looked at;
     when fewer fit, every machine is looked at and all that fit are kept;
  2. `default`: score the sample with LeastAllocated + BalancedAllocation;
     `kiln`: hand the sample to Kiln's filter (spot guarantee) and score, as the
     deployed extender is called with it;
  3. the best score wins; ties are broken uniformly at random (selectHost).

`Placer.choose` runs the compiled step (`placement.choose`, which calls the
extender's scoring kernel); `Placer.choose_reference` is the numpy reference
(`kubedefault`, `scoring.filter_nodes`/`score_nodes`) that tests hold equal to it.

Resources are counted in whole units of 1e-10 of the trace's largest machine
(`RESOURCE_UNIT`; the trace's figures have at most 10 decimals, e.g. 9.537e-07),
held as integer-valued floats, as kube-scheduler counts milli-CPU and bytes in int64: every sum and
difference is exact, so a node holding exactly what a pod asks for fits, and
NodeResourcesFit (free >= request) and Kiln's resource check (requested +
request <= allocatable) agree node for node. Scores only use ratios of them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from scheduler import kubedefault, pools, scoring
from scheduler.replay import placement
from scheduler.replay.prices import PriceModel, on_demand_price

KILN, DEFAULT, KILN_NO_SPREAD = "kiln", "default", "kiln-no-spread"
# `kiln-no-spread`: Kiln's filter and score without the capacity-pool spread filter.
SCHEDULERS = (KILN, DEFAULT, KILN_NO_SPREAD)
KILN_SCHEDULERS = (KILN, KILN_NO_SPREAD)
# Resource unit: 1e-10 of the largest machine; every trace figure is a whole number of units.
RESOURCE_UNIT = 1e10
# kube-scheduler's non-zero defaults for scoring a pod that requests nothing
# (100m cpu, 200 MiB: util/pod_resources.go), in units: 0.1 of 64 vCPU, 200 MiB of 256 GiB.
NON_ZERO_CPU = float(round(0.1 / 64 * RESOURCE_UNIT))
NON_ZERO_MEM = float(round(200 * 2**20 / (256 * 2**30) * RESOURCE_UNIT))


def to_units(values: np.ndarray) -> np.ndarray:
    """Normalised trace figures -> whole resource units (integer-valued floats; NaN stays NaN)."""
    return np.round(np.asarray(values, dtype=np.float64) * RESOURCE_UNIT)


LAT, STD, BAT = 0, 1, 2
CLASS_NAMES = {LAT: scoring.LATENCY_SENSITIVE, STD: scoring.STANDARD, BAT: scoring.BATCH}


def task_class(priority: int) -> int:
    """Priority 9-11 is latency-sensitive, 0-1 batch, 2-8 standard."""
    if priority >= 9:
        return LAT
    if priority <= 1:
        return BAT
    return STD


@dataclass(frozen=True)
class ReplayConfig:
    """One run: which scheduler, spot fraction and start, and the seed of every draw."""

    scheduler: str
    spot_fraction: float
    start: str
    seed: int = 1
    weights: scoring.Weights = field(default_factory=scoring.Weights)
    percentage_of_nodes_to_score: int = 0
    compiled: bool = True  # the numba placement step; False runs the numpy reference
    # k of the capacity-pool spread filter (`pools.max_per_pool`); Kiln only, never kiln-no-spread.
    spread_k: int = 2

    @property
    def spreads(self) -> bool:
        """Whether this run applies the capacity-pool spread filter."""
        return self.scheduler == KILN


class Cluster:
    """Per-machine arrays for one run; rows follow scoring.NodeArrays.COLUMNS."""

    def __init__(self, n: int, prices: PriceModel, fraction: float) -> None:
        self.n = n
        self.matrix = np.zeros((n, len(scoring.NodeArrays.COLUMNS)), dtype=np.float64)
        self.spot = prices.spot_mask(fraction)
        self.on_demand = ~self.spot
        self.matrix[:, 7] = np.where(self.spot, prices.likelihood(), 0.0)
        self.matrix[:, 8] = self.spot.astype(np.float64)
        self.discount = prices.discount
        # Each machine's capacity pool (shape x zone x capacity type), set by `set_pools`.
        self.pool_of = np.zeros(n, dtype=np.int32)
        self.pool_names: list[str] = []
        # Free capacity for the fit check; -1 marks an absent machine so nothing fits.
        self.free_cpu = np.full(n, -1.0)
        self.free_mem = np.full(n, -1.0)
        # Upper bounds of each 64-machine block's largest free cpu and memory (the placement scan).
        self.block_cpu = np.full(placement.block_count(n), -1.0)
        self.block_mem = np.full(placement.block_count(n), -1.0)
        self.active = np.zeros(n, dtype=bool)
        self.active_count = 0
        self.tasks = np.zeros(n, dtype=np.int64)
        self.latency = np.zeros(n, dtype=np.int64)
        self.generation = np.zeros(n, dtype=np.int64)
        self.od_price = np.zeros(n)
        self.busy_price = 0.0
        self.busy_od_price = 0.0
        self.busy_count = 0

    def set_pools(self, shapes: np.ndarray, zones: np.ndarray) -> None:
        """Capacity pools: machines of one shape (the trace's instance type) in one zone and of
        one capacity type share a pool; `shapes` and `zones` are small integers per machine."""
        names = [
            pools.capacity_pool(
                f"shape-{int(s)}", f"zone-{chr(97 + int(z))}", "spot" if sp else "on-demand"
            )
            for s, z, sp in zip(shapes.tolist(), zones.tolist(), self.spot.tolist(), strict=True)
        ]
        index: dict[str, int] = {}
        self.pool_of = np.array([index.setdefault(x, len(index)) for x in names], dtype=np.int32)
        self.pool_names = list(index)

    def set_capacity(self, m: int, cpu: float, mem: float) -> None:
        """ADD or UPDATE: set capacity (resource units) and price; free capacity follows what is requested."""
        row = self.matrix[m]
        if self.tasks[m] > 0:
            self.busy_price -= row[6]
            self.busy_od_price -= self.od_price[m]
        row[0], row[1] = cpu, mem
        od = float(on_demand_price(cpu / RESOURCE_UNIT, mem / RESOURCE_UNIT))
        self.od_price[m] = od
        row[6] = od * (1.0 - self.discount[m]) if self.spot[m] else od
        if self.tasks[m] > 0:
            self.busy_price += row[6]
            self.busy_od_price += od
        if not self.active[m]:
            self.active[m] = True
            self.active_count += 1
        self.free_cpu[m] = cpu - row[3]
        self.free_mem[m] = mem - row[4]
        self._raise_block(m)

    def _raise_block(self, m: int) -> None:
        """Keep m's block bounds at least its free capacity (after capacity came back)."""
        b = m >> placement.BLOCK_SHIFT
        if self.free_cpu[m] > self.block_cpu[b]:
            self.block_cpu[b] = self.free_cpu[m]
        if self.free_mem[m] > self.block_mem[b]:
            self.block_mem[b] = self.free_mem[m]

    def remove(self, m: int) -> tuple[int, int]:
        """REMOVE: drop every task on the machine; return (tasks, latency-class tasks) dropped."""
        if not self.active[m]:
            return 0, 0
        dropped, latency = int(self.tasks[m]), int(self.latency[m])
        if dropped:
            self.busy_price -= self.matrix[m, 6]
            self.busy_od_price -= self.od_price[m]
            self.busy_count -= 1
        self.tasks[m] = 0
        self.latency[m] = 0
        self.matrix[m, 3] = self.matrix[m, 4] = 0.0
        self.generation[m] += 1
        self.active[m] = False
        self.active_count -= 1
        self.free_cpu[m] = self.free_mem[m] = -1.0
        return dropped, latency

    def place(self, m: int, cpu: float, mem: float, latency: bool) -> None:
        """Add a task's requests to machine m."""
        row = self.matrix[m]
        row[3] += cpu
        row[4] += mem
        self.free_cpu[m] -= cpu
        self.free_mem[m] -= mem
        if self.tasks[m] == 0:
            self.busy_price += row[6]
            self.busy_od_price += self.od_price[m]
            self.busy_count += 1
        self.tasks[m] += 1
        if latency:
            self.latency[m] += 1

    def free(self, m: int, cpu: float, mem: float, latency: bool) -> None:
        """Take a task's requests off machine m."""
        row = self.matrix[m]
        row[3] -= cpu
        row[4] -= mem
        self.free_cpu[m] += cpu
        self.free_mem[m] += mem
        self._raise_block(m)
        self.tasks[m] -= 1
        if latency:
            self.latency[m] -= 1
        if self.tasks[m] == 0:
            self.busy_price -= row[6]
            self.busy_od_price -= self.od_price[m]
            self.busy_count -= 1


class Placer:
    """kube-scheduler's sampling loop plus the scorer under test."""

    def __init__(self, cluster: Cluster, config: ReplayConfig, rng: random.Random) -> None:
        self.cluster = cluster
        self.config = config
        self.rng = rng
        self.next_start = 0
        self.need = 0
        self.retries = 0
        n = cluster.n
        # Buffers of the compiled step, allocated once per run.
        self._state = np.zeros(2, dtype=np.int64)
        self._sample = np.empty(n, dtype=np.int64)
        self._rows = np.empty_like(cluster.matrix)
        self._usable = np.ones(n, dtype=np.bool_)
        self._reasons = np.empty(n, dtype=np.int8)
        self._score = np.empty(n, dtype=np.int64)
        self._candidates = np.empty(n, dtype=np.int64)
        self._kiln = config.scheduler in KILN_SCHEDULERS
        self._no_pools = np.zeros(1, dtype=np.bool_)
        self._restart = [scoring.RESTART_COST[CLASS_NAMES[k]] for k in (LAT, STD, BAT)]
        self.refresh()

    def refresh(self) -> None:
        """Recompute how many feasible nodes to look for (after machines come or go)."""
        self.need = kubedefault.num_feasible_nodes_to_find(
            self.cluster.active_count, self.config.percentage_of_nodes_to_score
        )

    def sample(self, cpu: float, mem: float) -> np.ndarray:
        """The first `need` machines from next_start that fit the request; advances next_start."""
        c = self.cluster
        n, need = c.n, self.need
        if need <= 0:
            return np.empty(0, dtype=np.int64)
        width = max(2 * need, 512)
        found: list[np.ndarray] = []
        count = scanned = 0
        pos = self.next_start
        while scanned < n:
            hi = min(pos + width, n, pos + (n - scanned))
            idx = np.flatnonzero((c.free_cpu[pos:hi] >= cpu) & (c.free_mem[pos:hi] >= mem))
            if count + idx.shape[0] >= need:
                idx = idx[: need - count]
                found.append(idx + pos)
                self.next_start = (pos + int(idx[-1]) + 1) % n
                return np.concatenate(found) if len(found) > 1 else found[0]
            if idx.shape[0]:
                found.append(idx + pos)
                count += idx.shape[0]
            scanned += hi - pos
            pos = hi % n
            width *= 2  # few fit here: look further per step (a nearly full cluster)
        # Looked at every node: kube-scheduler's start index comes back to where it was.
        if not found:
            return np.empty(0, dtype=np.int64)
        return np.concatenate(found) if len(found) > 1 else found[0]

    def any_on_demand_fits(
        self, cpu: float, mem: float, blocked: np.ndarray | None = None, spot_ok: bool = False
    ) -> bool:
        """Whether any machine Kiln's filter could pass fits the request: on-demand, or (with
        `spot_ok`) spot in a capacity pool not `blocked` for the task's workload."""
        c = self.cluster
        acceptable = c.on_demand
        if spot_ok and blocked is not None:
            acceptable = c.on_demand | ~blocked[c.pool_of]
        return bool(((c.free_cpu >= cpu) & (c.free_mem >= mem) & acceptable).any())

    def choose(self, cpu: float, mem: float, klass: int, blocked: np.ndarray | None = None) -> int:
        """Machine index for a task, or -1 when nothing fits (compiled unless configured off).

        `blocked` (per capacity pool) marks the pools holding their share of the task's
        workload's spot replicas; None when the workload is not spread."""
        if not self.config.compiled:
            return self.choose_reference(cpu, mem, klass, blocked)
        c = self.cluster
        attempts = 1
        if self._kiln and self.need:
            attempts = -(-c.active_count // self.need)
        state = self._state
        state[0] = self.next_start
        state[1] = self.retries
        w = self.config.weights
        count = placement.choose(
            c.free_cpu,
            c.free_mem,
            c.block_cpu,
            c.block_mem,
            c.matrix,
            c.on_demand,
            c.n,
            self.need,
            state,
            cpu,
            mem,
            cpu if cpu > 0 else NON_ZERO_CPU,
            mem if mem > 0 else NON_ZERO_MEM,
            self._kiln,
            klass == LAT,
            attempts,
            w.cost,
            w.packing,
            w.risk,
            self._restart[klass],
            self._sample,
            self._rows,
            self._usable,
            self._reasons,
            self._score,
            self._candidates,
            c.pool_of,
            blocked if blocked is not None else self._no_pools,
            blocked is not None,
        )
        self.next_start = int(state[0])
        self.retries = int(state[1])
        if count == 0:
            return -1
        if count > 1:
            return int(self._candidates[self.rng.randrange(count)])
        return int(self._candidates[0])

    def choose_reference(
        self, cpu: float, mem: float, klass: int, blocked: np.ndarray | None = None
    ) -> int:
        """Machine index for a task, or -1 when nothing fits (numpy reference of `placement.choose`).

        When Kiln's filter rejects the whole sample, the pod goes back to the
        queue and kube-scheduler tries again from the next start index; the
        retries stop once the attempts have walked the whole ring of nodes.
        """
        attempts = 1
        if self._kiln and self.need:
            attempts = -(-self.cluster.active_count // self.need)
        for _ in range(attempts):
            sample = self.sample(cpu, mem)
            if sample.shape[0] == 0:
                return -1
            rows = self.cluster.matrix[sample]
            if self.config.scheduler == DEFAULT:
                scores = kubedefault.default_scores(
                    rows[:, 0],
                    rows[:, 1],
                    rows[:, 3],
                    rows[:, 4],
                    cpu if cpu > 0 else NON_ZERO_CPU,
                    mem if mem > 0 else NON_ZERO_MEM,
                )
            else:
                pod = scoring.PodRequest(cpu=cpu, memory=mem, workload_class=CLASS_NAMES[klass])
                nodes = scoring.NodeArrays.from_matrix(rows)
                if blocked is not None:
                    # The capacity-pool filter first, as the compiled step marks them unusable.
                    spread = nodes.spot & blocked[self.cluster.pool_of[sample]]
                    reasons = np.where(
                        spread, pools.REASON_SPREAD, scoring.filter_nodes(nodes, pod)
                    ).astype(np.int8)
                else:
                    reasons = scoring.filter_nodes(nodes, pod)
                feasible = reasons == scoring.FIT
                if not feasible.any():
                    spot_ok = blocked is not None and klass != LAT
                    if sample.shape[0] < self.need or not self.any_on_demand_fits(
                        cpu, mem, blocked, spot_ok
                    ):
                        return -1  # no retry can succeed: every node that fits was seen, or is spot
                    self.retries += 1
                    continue
                scores = np.where(
                    feasible, scoring.score_nodes(nodes, pod, self.config.weights, reasons), -1
                )
            candidates = np.flatnonzero(scores == scores.max())
            if candidates.shape[0] > 1:
                return int(sample[candidates[self.rng.randrange(candidates.shape[0])]])
            return int(sample[candidates[0]])
        return -1
