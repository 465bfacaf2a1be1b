"""The trace replay on a small slice of the real Google 2011 trace (../shared/data/google-2011)."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from audit.models import OutboxEvent
from scheduler.models import ReplayReport
from scheduler.replay import ReplayConfig, load_trace, parse_parts, run_many, run_replay
from scheduler.replay.cluster import BAT, LAT, STD, task_class
from scheduler.replay.prices import PriceModel, on_demand_price
from scheduler.replay.trace import SCHEDULE, MachineEvents, TaskEvents, Trace, TraceError
from tests.scheduler.conftest import TRACE_DIR

RUN_KEYS = {
    "scheduler",
    "spot_fraction",
    "start",
    "latency_on_spot",
    "unschedulable",
    "cost",
    "latency_disrupted_by_reclaim",
    "wall_seconds",
}


@pytest.fixture(scope="module")
def trace_slice(tmp_path_factory) -> Path:
    """Real rows: the full machine_events table, and from task_events part 0 rows 144,340-147,339
    (SCHEDULE events at time 0: tasks already running) plus rows 300,001-304,000 (minutes into
    the trace window)."""
    folder = tmp_path_factory.mktemp("google-2011")
    (folder / "machine_events").mkdir()
    shutil.copy(
        TRACE_DIR / "machine_events" / "part-00000-of-00001.csv.gz", folder / "machine_events"
    )
    lines: list[str] = []
    with gzip.open(TRACE_DIR / "task_events" / "part-00000-of-00500.csv.gz", "rt") as handle:
        for i, line in enumerate(handle):
            if 144_339 <= i < 147_339 or 300_000 <= i < 304_000:
                lines.append(line)
            if i >= 304_000:
                break
    (folder / "task_events").mkdir()
    with gzip.open(folder / "task_events" / "part-00000-of-00500.csv.gz", "wt") as out:
        out.writelines(lines)
    return folder


@pytest.fixture(scope="module")
def trace(trace_slice):
    return load_trace(trace_slice, [0])


@pytest.mark.parametrize(
    ("spec", "parts"),
    [("0-13", list(range(14))), ("0,2,5-7", [0, 2, 5, 6, 7]), ("3", [3]), (" 1 - 2 ", [1, 2])],
    ids=["range", "mixed", "single", "spaces"],
)
def test_parse_parts(spec, parts):
    assert parse_parts(spec) == parts


@pytest.mark.parametrize(
    "spec",
    ["", "a-b", "5-3", "0-500", "1,,2"],
    ids=["empty", "letters", "reversed", "beyond", "gap"],
)
def test_parse_parts_rejects(spec):
    with pytest.raises(TraceError):
        parse_parts(spec)


@pytest.mark.parametrize(
    ("priority", "klass"),
    [(11, LAT), (9, LAT), (8, STD), (2, STD), (1, BAT), (0, BAT)],
    ids=["p11", "p9", "p8", "p2", "p1", "p0"],
)
def test_priority_classes(priority, klass):
    assert task_class(priority) == klass


def test_price_model_matches_m5_list_prices():
    # m5.large is 2 vCPU / 8 GiB = (2/64, 8/256) in trace units: 2*0.0336 + 8*0.0036 = 0.096.
    assert float(on_demand_price(2 / 64, 8 / 256)) == pytest.approx(0.096)
    # A (0.5, 0.5) machine: 32 vCPU / 128 GiB = 1.0752 + 0.4608 = 1.536 (m5.8xlarge).
    assert float(on_demand_price(0.5, 0.5)) == pytest.approx(1.536)


def test_spot_fractions_are_nested_and_seeded():
    model = PriceModel.draw(10_000, seed=1)
    low, high = model.spot_mask(0.3), model.spot_mask(0.7)
    assert (high | ~low).all()  # every machine spot at 0.3 is spot at 0.7
    assert 0.27 < low.mean() < 0.33
    assert (PriceModel.draw(10_000, seed=1).lottery == model.lottery).all()


def test_trace_slice_reads_real_rows(trace):
    assert len(set(trace.machines.machine.tolist())) == 12_583  # SOURCE.md: 12,583 machine ids
    assert trace.rows_read == 7_000
    assert (trace.tasks.kind == SCHEDULE).sum() > 1000


@pytest.mark.parametrize("fraction", [0.2, 0.9], ids=["spot-20", "spot-90"])
@pytest.mark.parametrize("start", ["trace", "empty"])
def test_kiln_never_puts_latency_tasks_on_spot_and_default_does(trace, fraction, start):
    kiln = run_replay(trace, ReplayConfig("kiln", fraction, start, seed=1))
    default = run_replay(trace, ReplayConfig("default", fraction, start, seed=1))
    assert kiln.latency_on_spot == 0
    assert kiln.latency_placements > 0
    if fraction >= 0.5:
        # Spot-blind: about `fraction` of its latency placements land on spot.
        assert default.latency_on_spot > 0.2 * default.latency_placements
    schedules = int((trace.tasks.kind == SCHEDULE).sum())
    for run in (kiln, default):
        # Every SCHEDULE is either pinned (start=trace, time 0), placed or unschedulable.
        assert run.pinned_at_start + run.placements + run.unschedulable == schedules
        assert (run.pinned_at_start > 0) == (start == "trace")
        assert run.cost > 0 and 0 < run.savings_vs_on_demand < 1


def test_replay_is_deterministic_for_a_seed(trace):
    one = run_replay(trace, ReplayConfig("kiln", 0.5, "trace", seed=3)).as_dict()
    two = run_replay(trace, ReplayConfig("kiln", 0.5, "trace", seed=3)).as_dict()
    for run in (one, two):
        run.pop("wall_seconds")
        run.pop("cpu_seconds")
        run.pop("placements_per_second")
    assert one == two


def test_replay_command_prints_json_and_stores_the_report(trace_slice, tmp_path, db):
    out = io.StringIO()
    target = tmp_path / "replay.json"
    call_command(
        "scheduler_replay",
        "--trace", str(trace_slice),
        "--parts", "0",
        "--spot-fractions", "0.3,0.9",
        "--start", "trace",
        "--schedulers", "kiln,default",
        "--seed", "1",
        "--json", str(target),
        "--store",
        stdout=out,
        stderr=io.StringIO(),
    )  # fmt: skip
    report = json.loads(out.getvalue())
    assert json.loads(target.read_text()) == report
    assert report["nodes"] == 12_583
    assert report["placements"] > report["latency_class_placements"] > 0
    assert len(report["runs"]) == 4
    for run in report["runs"]:
        assert RUN_KEYS <= set(run)
    assert {(r["scheduler"], r["spot_fraction"]) for r in report["runs"]} == {
        ("kiln", 0.3), ("default", 0.3), ("kiln", 0.9), ("default", 0.9)
    }  # fmt: skip
    assert all(r["latency_on_spot"] == 0 for r in report["runs"] if r["scheduler"] == "kiln")
    # Workload Commitment per scheduler over trace time, in each run and summarised.
    assert all(r["commitment"]["samples"] > 0 for r in report["runs"])
    assert {(c["scheduler"], c["spot_fraction"]) for c in report["commitment"]} == {
        (r["scheduler"], r["spot_fraction"]) for r in report["runs"]
    }
    assert all(0 < c["cpu"] <= 1 and 0 < c["memory"] <= 1 for c in report["commitment"])
    stored = ReplayReport.objects.get()
    assert stored.report["runs"] == report["runs"]
    assert OutboxEvent.objects.filter(action="scheduler.replay.stored").count() == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["--parts", "9-1"],
        ["--spot-fractions", "0.5,1.5"],
        ["--spot-fractions", "half"],
        ["--start", "midway"],
        ["--schedulers", "kiln,volcano"],
        ["--trace", "/nonexistent/trace"],
    ],
    ids=[
        "bad-parts",
        "fraction-above-1",
        "fraction-word",
        "bad-start",
        "bad-scheduler",
        "missing-trace",
    ],
)
def test_replay_command_rejects_bad_arguments_and_stores_nothing(trace_slice, argv, db):
    args = ["--trace", str(trace_slice), "--parts", "0", "--store", *argv]
    with pytest.raises(CommandError):
        call_command("scheduler_replay", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert ReplayReport.objects.count() == 0


def _synthetic_trace(seed: int, machines: int = 240, events: int = 2500):
    """A crowded random cluster: identical and odd machines, big tasks, removals and re-adds."""
    rng = np.random.default_rng(seed)
    ids = np.arange(machines) * 7 + 3
    m_time = [0] * machines
    m_id = ids.tolist()
    m_kind = [0] * machines
    m_cpu = rng.choice([0.25, 0.5, 0.5, 1.0], machines).tolist()
    m_mem = rng.choice([0.25, 0.5, 0.5, 0.75], machines).tolist()
    m_cpu[5] = float("nan")  # the trace leaves some capacities empty
    t_end = 3_600_000_000
    for k in range(40):
        t = int(WINDOW_START + k * t_end / 40)
        mid = int(rng.choice(ids))
        m_time += [t, t + 5_000_000]
        m_id += [mid, mid]
        m_kind += [1, 0]
        m_cpu += [float("nan"), 0.5]
        m_mem += [float("nan"), 0.5]
    order = np.argsort(np.array(m_time), kind="stable")
    machine_events = MachineEvents(
        time=np.array(m_time, dtype=np.int64)[order],
        machine=np.array(m_id, dtype=np.int64)[order],
        kind=np.array(m_kind, dtype=np.int8)[order],
        cpu=np.array(m_cpu)[order],
        mem=np.array(m_mem)[order],
    )
    at_zero = events // 5
    times = np.concatenate(
        [
            np.zeros(at_zero, dtype=np.int64),
            np.sort(rng.integers(WINDOW_START, t_end, events - at_zero)),
        ]
    )
    keys = rng.integers(0, events // 2, events)
    kinds = np.where(rng.random(events) < 0.7, SCHEDULE, rng.choice([2, 3, 4, 5, 6], events))
    kinds[:at_zero] = SCHEDULE
    tasks = TaskEvents(
        time=times,
        key=keys.astype(np.int64),
        machine=rng.choice(ids, events).astype(np.int64),
        kind=kinds.astype(np.int8),
        priority=rng.integers(0, 12, events).astype(np.int8),
        cpu=rng.choice([0.0, 0.01, 0.05, 0.1, 0.3], events),
        mem=rng.choice([0.0, 0.02, 0.05, 0.1, 0.2], events),
    )
    return Trace(machine_events, tasks, [0], events, 1.0)


WINDOW_START = 600_000_000


@pytest.mark.parametrize("seed", [1, 2])
def test_compiled_placement_matches_the_numpy_reference(seed):
    """The numba placement step gives the very same runs as the numpy reference, ties and retries included."""
    trace = _synthetic_trace(seed)
    exercised = {"unschedulable": 0, "scheduling_retries": 0, "placements": 0}
    for scheduler in ("kiln", "default"):
        for start in ("trace", "empty"):
            for fraction in (0.3, 0.97):
                runs = []
                for compiled in (True, False):
                    config = ReplayConfig(scheduler, fraction, start, seed=seed, compiled=compiled)
                    data = run_replay(trace, config).as_dict()
                    del data["wall_seconds"], data["cpu_seconds"], data["placements_per_second"]
                    runs.append(data)
                assert runs[0] == runs[1], (scheduler, start, fraction)
                for key in exercised:
                    exercised[key] += runs[0][key]
    assert all(exercised.values()), exercised  # the slice really crowds the cluster


def test_parallel_runs_equal_sequential_runs():
    """run_many over two forked workers returns the sequential results in config order."""
    trace = _synthetic_trace(4)
    configs = [ReplayConfig(s, f, "empty") for s in ("kiln", "default") for f in (0.1, 0.7)]

    def strip(results):
        out = []
        for r in results:
            d = r.as_dict()
            del d["wall_seconds"], d["cpu_seconds"], d["placements_per_second"]
            out.append(d)
        return out

    assert strip(run_many(trace, configs, 2)) == strip(run_many(trace, configs, 1))


def _one_machine_trace(capacity: tuple[float, float], requests: list[tuple[float, float]]):
    """One machine added at time 0 and standard-class tasks (priority 5) scheduled one after another."""
    return _machines_trace([capacity], requests)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("scheduler", ["kiln", "default"])
@pytest.mark.parametrize(
    ("capacity", "requests"),
    [
        # 0.3 - 0.1 - 0.1 is 0.09999999999999998 in floating point: the third task fits
        # exactly (300m = 3 x 100m in kube-scheduler's integer milli-CPU).
        ((0.3, 0.5), [(0.1, 0.01)] * 3),
        # 0.6 - 0.1 - 0.2 leaves 0.3 (NodeResourcesFit admits the 0.3 task) while
        # 0.1 + 0.2 + 0.3 is 0.6000000000000001 > 0.6 (Kiln's check refused it).
        ((0.6, 0.5), [(0.1, 0.01), (0.2, 0.01), (0.3, 0.01)]),
        ((0.5, 0.3), [(0.01, 0.1)] * 3),
    ],
    ids=["exact-fill", "fit-and-kiln-agree", "exact-fill-memory"],
)
def test_a_task_that_fits_exactly_is_placed_by_both_schedulers(
    capacity, requests, scheduler, compiled
):
    """Resources add up exactly (integer units, as kube-scheduler counts them): a machine
    holding exactly what the tasks ask for takes them all, for both schedulers alike."""
    trace = _one_machine_trace(capacity, requests)
    run = run_replay(trace, ReplayConfig(scheduler, 0.0, "empty", seed=1, compiled=compiled))
    assert run.unschedulable == 0
    assert run.placements == len(requests)
    # One more request than the machine holds is still refused.
    over = _one_machine_trace(capacity, [*requests, (0.0001, 0.0001)])
    run = run_replay(over, ReplayConfig(scheduler, 0.0, "empty", seed=1, compiled=compiled))
    assert (run.placements, run.unschedulable) == (len(requests), 1)


def test_kiln_keeps_machines_balanced_so_a_later_task_still_fits():
    """Two identical on-demand machines (0.5, 0.5) and standard tasks in this order: (0.3, 0.05)
    lands on one; (0.1, 0.05) goes to the other, because on the first it would leave cpu used up
    beside free memory (mean utilisation alone put it there); then three (0.2, 0.2) tasks all fit.
    Placed by fill alone, the third (0.2, 0.2) found no machine with both the cpu and the memory."""
    requests = [(0.3, 0.05), (0.1, 0.05), (0.2, 0.2), (0.2, 0.2), (0.2, 0.2)]
    trace = _machines_trace([(0.5, 0.5), (0.5, 0.5)], requests)
    for compiled in (True, False):
        run = run_replay(trace, ReplayConfig("kiln", 0.0, "empty", seed=1, compiled=compiled))
        assert (run.placements, run.unschedulable) == (len(requests), 0)


def _machines_trace(capacities: list[tuple[float, float]], requests: list[tuple[float, float]]):
    """Machines added at time 0 and standard-class tasks (priority 5) scheduled one after another."""
    n = len(capacities)
    machines = MachineEvents(
        time=np.zeros(n, dtype=np.int64),
        machine=np.arange(n, dtype=np.int64) + 42,
        kind=np.zeros(n, dtype=np.int8),
        cpu=np.array([c[0] for c in capacities]),
        mem=np.array([c[1] for c in capacities]),
    )
    count = len(requests)
    tasks = TaskEvents(
        time=WINDOW_START + np.arange(count, dtype=np.int64) * 1_000_000,
        key=np.arange(count, dtype=np.int64),
        machine=np.full(count, -1, dtype=np.int64),
        kind=np.full(count, SCHEDULE, dtype=np.int8),
        priority=np.full(count, 5, dtype=np.int8),
        cpu=np.array([r[0] for r in requests]),
        mem=np.array([r[1] for r in requests]),
    )
    return Trace(machines, tasks, [0], count, 1.0)


@pytest.mark.parametrize("scheduler", ["kiln", "default"])
def test_workload_commitment_is_sampled_every_trace_hour_with_pending_beside_it(scheduler):
    """Two machines (0.5, 0.5): a (0.25, 0.1) task at the window's start, a (0.9, 0.9) task that
    fits nowhere a second later, and a (0.25, 0.1) task two hours on. Samples at hours 0, 1, 2
    see one task: cpu 0.25 / 1.0 = 0.25, memory 0.1 / 1.0 = 0.1; the task that found no
    machine is pending demand of the hour-1 sample (0.9 / 1.0), beside the ratio, not in it."""
    hour = 3_600_000_000
    base = _machines_trace([(0.5, 0.5), (0.5, 0.5)], [(0.25, 0.1)])
    times = [WINDOW_START, WINDOW_START + 1_000_000, WINDOW_START + 2 * hour + 1_000_000]
    tasks = TaskEvents(
        time=np.array(times, dtype=np.int64),
        key=np.arange(3, dtype=np.int64),
        machine=np.full(3, -1, dtype=np.int64),
        kind=np.full(3, SCHEDULE, dtype=np.int8),
        priority=np.full(3, 5, dtype=np.int8),
        cpu=np.array([0.25, 0.9, 0.25]),
        mem=np.array([0.1, 0.9, 0.1]),
    )
    trace = Trace(base.machines, tasks, [0], 3, 1.0)
    run = run_replay(trace, ReplayConfig(scheduler, 0.0, "empty", seed=1))
    series = run.commitment["series"]
    assert series["t_hours"] == [0.0, 1.0, 2.0]
    assert series["cpu"] == [0.25, 0.25, 0.25] and series["memory"] == [0.1, 0.1, 0.1]
    assert series["cpu_pending"] == [0.0, 0.9, 0.0]
    assert series["cpu_p90"] == [0.5, 0.5, 0.5]  # one machine holds 0.25 of its 0.5
    assert run.commitment["summary"]["cpu"]["mean"] == 0.25
    assert run.as_dict()["commitment"]["samples"] == 3
