"""The replay core: machines and tasks from the trace, placements by the scheduler under test.

Events are applied in time order to a `cluster.Cluster`; each SCHEDULE asks
`cluster.Placer` for a machine (kube-scheduler's sampling, then Kiln's or the
default scorer; see `scheduler/replay/cluster.py`).

Tasks: priority >= 9 is latency-sensitive, 0-1 batch, the rest standard.
SCHEDULE places a task; EVICT, FAIL, FINISH, KILL and LOST free it. A placement
that finds no node counts as unschedulable and is not retried (the trace's own
later SCHEDULE of the same task is another attempt). REMOVE of a machine drops
every task on it (counted as disrupted) and ADD brings it back empty.
Cost integrates, over the trace window, the price of every machine holding at
least one task: sum(node-hours * $/h). Workload Commitment is sampled every trace
hour (`replay/commitment_series.py`).
"""

from __future__ import annotations

import multiprocessing
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from scheduler.replay.cluster import (
    LAT,
    SCHEDULERS,
    Cluster,
    Placer,
    ReplayConfig,
    task_class,
    to_units,
)
from scheduler.replay.commitment_series import CommitmentSeries
from scheduler.replay.prices import PriceModel
from scheduler.replay.reclaim import ReclaimStudy, Workloads, job_of
from scheduler.replay.trace import (
    END_EVENTS,
    MACHINE_ADD,
    MACHINE_REMOVE,
    SCHEDULE,
    Trace,
)

START_TRACE, START_EMPTY = "trace", "empty"
STARTS = (START_TRACE, START_EMPTY)
WINDOW_START_US = 600_000_000  # the trace window opens at 600 s; time 0 means "before it"
US_PER_HOUR = 3_600_000_000


@dataclass
class RunResult:
    """Figures of one run (see the module docstring for their definitions)."""

    scheduler: str
    spot_fraction: float
    start: str
    placements: int = 0
    spot_placements: int = 0
    latency_placements: int = 0
    pinned_at_start: int = 0
    latency_on_spot: int = 0
    initial_latency_on_spot: int = 0
    unschedulable: int = 0
    latency_unschedulable: int = 0
    cost: float = 0.0
    on_demand_cost: float = 0.0
    savings_vs_on_demand: float = 0.0
    busy_node_hours: float = 0.0
    tasks_disrupted_by_reclaim: int = 0
    latency_disrupted_by_reclaim: int = 0
    latency_disrupted_on_spot: int = 0
    wall_seconds: float = 0.0
    cpu_seconds: float = (
        0.0  # this process's CPU time: the figure a shared, loaded machine leaves intact
    )
    placements_per_second: float = 0.0
    scheduling_retries: int = 0
    commitment: dict = field(default_factory=dict)  # CommitmentSeries.as_dict()
    spread_k: int | None = None  # k of the capacity-pool spread filter (None: not applied)
    capacity_pools: int = 0
    reclaim_study: dict = field(default_factory=dict)  # ReclaimStudy.as_dict()

    def as_dict(self) -> dict:
        """The run as a JSON-ready dict (money and ratios rounded)."""
        data = asdict(self)
        for key in ("cost", "on_demand_cost", "busy_node_hours"):
            data[key] = round(data[key], 2)
        for key in ("savings_vs_on_demand", "wall_seconds", "cpu_seconds", "placements_per_second"):
            data[key] = round(data[key], 4)
        return data


def run_replay(
    trace: Trace,
    config: ReplayConfig,
    *,
    progress: Callable[[str], None] | None = None,
    progress_every: int = 200_000,
) -> RunResult:
    """Replay the trace once under `config` and return its figures."""
    if config.scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {SCHEDULERS}, not {config.scheduler!r}")
    if config.start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, not {config.start!r}")
    started = time.perf_counter()
    cpu_started = time.process_time()
    me = trace.machines
    ids = np.unique(me.machine)
    index = {int(mid): i for i, mid in enumerate(ids.tolist())}
    n = len(ids)
    cluster = Cluster(n, PriceModel.draw(n, config.seed), config.spot_fraction)
    cluster.set_pools(*machine_pools(trace, index, n, config.seed))
    placer = Placer(cluster, config, random.Random(config.seed))
    result = RunResult(config.scheduler, config.spot_fraction, config.start)
    result.capacity_pools = len(cluster.pool_names)
    spread_k = config.spread_k if config.spreads else 0
    result.spread_k = spread_k or None
    pool_of = cluster.pool_of.tolist()
    workloads = Workloads(len(cluster.pool_names))
    spot_pools = np.zeros(len(cluster.pool_names), dtype=bool)
    spot_pools[cluster.pool_of[cluster.spot]] = True
    study = ReclaimStudy(WINDOW_START_US, spot_pools)
    on_machine: dict[int, set[int]] = {}

    m_time = me.time.tolist()
    m_idx = [index[int(x)] for x in me.machine.tolist()]
    m_kind = me.kind.tolist()
    m_cpu = to_units(me.cpu).tolist()
    m_mem = to_units(me.mem).tolist()
    m_count = len(m_time)
    j = 0

    te = trace.tasks
    t_time = te.time.tolist()
    t_key = te.key.tolist()
    t_machine = te.machine.tolist()
    t_kind = te.kind.tolist()
    t_prio = te.priority.tolist()
    t_cpu = to_units(te.cpu).tolist()
    t_mem = to_units(te.mem).tolist()

    running: dict[int, tuple[int, int, float, float, bool]] = {}
    last_time = WINDOW_START_US
    cost = od_cost = busy_hours = 0.0
    spot = cluster.spot
    pin = config.start == START_TRACE
    end_events = END_EVENTS
    next_report = progress_every
    series = CommitmentSeries(WINDOW_START_US)

    def apply_machines_until(t: int) -> None:
        """Apply the machine events up to time t (ADD, UPDATE, REMOVE), counting disrupted tasks."""
        nonlocal j
        changed = False
        while j < m_count and m_time[j] <= t:
            m = m_idx[j]
            kind = m_kind[j]
            if kind == MACHINE_REMOVE:
                for gone in on_machine.pop(m, ()):
                    running.pop(gone, None)
                    workloads.freed(job_of(gone), pool_of[m], spot[m])
                dropped, latency = cluster.remove(m)
                result.tasks_disrupted_by_reclaim += dropped
                result.latency_disrupted_by_reclaim += latency
                if spot[m]:
                    result.latency_disrupted_on_spot += latency
                changed = True
            else:
                cpu, mem = m_cpu[j], m_mem[j]
                if cpu != cpu or mem != mem:  # NaN: the trace left the capacity empty
                    row = cluster.matrix[m]
                    cpu = row[0] if cpu != cpu else cpu
                    mem = row[1] if mem != mem else mem
                if kind == MACHINE_ADD and not cluster.active[m]:
                    changed = True
                cluster.set_capacity(m, cpu, mem)
            j += 1
        if changed:
            placer.refresh()

    for i in range(len(t_time)):
        t = t_time[i]
        if t > series.next_us:
            series.sample_until(t, cluster.matrix, cluster.active)
        if t > study.next_us:
            tasks = np.bincount(cluster.pool_of, weights=cluster.tasks, minlength=len(spot_pools))
            study.sample_until(t, workloads, tasks.astype(np.int64))
        if t > last_time:
            hours = (t - last_time) / US_PER_HOUR
            cost += cluster.busy_price * hours
            od_cost += cluster.busy_od_price * hours
            busy_hours += cluster.busy_count * hours
            last_time = t
        if j < m_count and m_time[j] <= t:
            apply_machines_until(t)
        kind = t_kind[i]
        key = t_key[i]
        if kind == SCHEDULE:
            held = running.pop(key, None)
            if held is not None and cluster.generation[held[0]] == held[1]:
                cluster.free(held[0], held[2], held[3], held[4])
                on_machine[held[0]].discard(key)
                workloads.freed(job_of(key), pool_of[held[0]], spot[held[0]])
            cpu, mem = t_cpu[i], t_mem[i]
            klass = task_class(t_prio[i])
            latency = klass == LAT
            m = -1
            if pin and t == 0:
                traced = index.get(t_machine[i], -1)
                if traced >= 0 and cluster.active[traced]:
                    m = traced
                    result.pinned_at_start += 1
                    if latency and spot[m]:
                        result.initial_latency_on_spot += 1
            if m < 0:
                blocked = workloads.blocked(job_of(key), spread_k) if spread_k else None
                m = placer.choose(cpu, mem, klass, blocked)
                if m < 0:
                    series.add_pending(cpu, mem)
                    result.unschedulable += 1
                    if latency:
                        result.latency_unschedulable += 1
                    continue
                result.placements += 1
                if spot[m]:
                    result.spot_placements += 1
                if latency:
                    result.latency_placements += 1
                    if spot[m]:
                        result.latency_on_spot += 1
            cluster.place(m, cpu, mem, latency)
            running[key] = (m, int(cluster.generation[m]), cpu, mem, latency)
            on_machine.setdefault(m, set()).add(key)
            workloads.placed(job_of(key), pool_of[m], spot[m])
            if progress is not None and i >= next_report:
                next_report = i + progress_every
                progress(
                    f"{config.scheduler} spot={config.spot_fraction} start={config.start}: "
                    f"{i + 1}/{len(t_time)} events, {result.placements} placements, "
                    f"{time.perf_counter() - started:.1f}s"
                )
        elif kind in end_events:
            held = running.pop(key, None)
            if held is not None and cluster.generation[held[0]] == held[1]:
                cluster.free(held[0], held[2], held[3], held[4])
                on_machine[held[0]].discard(key)
                workloads.freed(job_of(key), pool_of[held[0]], spot[held[0]])
    result.cost = float(cost)
    result.on_demand_cost = float(od_cost)
    result.busy_node_hours = float(busy_hours)
    result.scheduling_retries = placer.retries
    result.commitment = series.as_dict()
    result.reclaim_study = study.as_dict()
    result.savings_vs_on_demand = float(1.0 - cost / od_cost) if od_cost > 0 else 0.0
    result.wall_seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu_started
    result.placements_per_second = (
        result.placements / result.wall_seconds if result.wall_seconds else 0.0
    )
    return result


ZONES = 3  # the replay's machines are spread over three zones, drawn from the seed


def machine_pools(
    trace: Trace, index: dict[int, int], n: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per machine: its shape (the trace's first capacity of it, as an instance type) and a zone
    drawn from the seed, for the capacity pools (`Cluster.set_pools`)."""
    me = trace.machines
    shapes = np.full(n, -1, dtype=np.int64)
    seen: dict[tuple[float, float], int] = {}
    for mid, cpu, mem in zip(me.machine.tolist(), me.cpu.tolist(), me.mem.tolist(), strict=True):
        m = index[int(mid)]
        if shapes[m] >= 0 or cpu != cpu or mem != mem:
            continue
        shapes[m] = seen.setdefault((cpu, mem), len(seen))
    shapes[shapes < 0] = len(seen)
    zones = np.random.default_rng([seed, 2011]).integers(0, ZONES, size=n)
    return shapes, zones


_SHARED: Trace | None = None  # the parsed trace, inherited by forked workers


def _worker_signals() -> None:
    """A forked worker takes SIGTERM and SIGINT as plain processes do: a handler the parent had
    installed would survive the fork, and Pool.terminate() could then wait on a worker that
    never ends."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and terminates
    # Forked with SIGTERM blocked (run_many): one sent before this point was held, not ignored
    # by the parent's handler, and ends the worker now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _run_shared(config: ReplayConfig) -> RunResult:
    assert _SHARED is not None
    return run_replay(_SHARED, config)


def run_many(
    trace: Trace,
    configs: list[ReplayConfig],
    workers: int = 1,
    progress: Callable[[str], None] | None = None,
) -> Iterator[RunResult]:
    """Run every config over one parsed trace, in order; `workers` > 1 forks that many processes."""
    if workers <= 1 or len(configs) <= 1:
        for config in configs:
            yield run_replay(trace, config, progress=progress)
        return
    global _SHARED
    _SHARED = trace
    try:
        context = multiprocessing.get_context("fork")
        # Workers are forked (now, and later by the pool's own thread, which inherits this mask)
        # with SIGTERM blocked: a Pool.terminate() that comes before a worker's initializer has
        # replaced the parent's handler is then held until the initializer unblocks it, instead
        # of being swallowed by that handler while terminate() waits for the worker forever.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            pool = context.Pool(min(workers, len(configs)), initializer=_worker_signals)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        with pool:
            yield from pool.imap(_run_shared, configs)
    finally:
        _SHARED = None
