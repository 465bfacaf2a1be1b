"""The benchmark's traffic: classes, seed sets, and each class simulated once into per-tick arrays.

Every judge reads the same arrays, so they are compared on exactly the same streams,
and tuning many configurations costs one simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from canary.sequential import (
    TickCounts,
    error_counts,
    rank_counts,
)
from canary.simulated_traffic import CLASSES, REGRESSIONS, Simulator, TrafficClass
from canary.traffic import weight_at

# Canary weight (percent) and ticks of one minute each: the benchmark's rollout.
BENCH_STEPS: tuple[tuple[int, int], ...] = ((10, 10), (25, 10), (50, 10))
HORIZON = sum(t for _, t in BENCH_STEPS)  # 30 planned minutes
MAX_TICKS = 3 * HORIZON  # the rollout default: the analysis may extend itself to 3x its plan
SAMPLE_CAP = 1000  # latency samples per arm and tick (a reservoir, as the metrics sources keep)
TAIL_QUANTILE = 0.995

# Seeds: constants are chosen on "tune", the table is reported on "report".
SEED_SETS = {"tune": 1_000, "report": 20_261_201}


@dataclass(frozen=True)
class BenchClass:
    """A traffic class of the benchmark and the regressions its regressed rollouts carry."""

    traffic: TrafficClass
    regressions: tuple[str, ...] = REGRESSIONS
    note: str = ""

    @property
    def canary_rps(self) -> float:
        """Canary requests per second at the first (10%) step."""
        return self.traffic.volume * BENCH_STEPS[0][0] / 100 / 60


def _rate_class(rate: float, rps: float) -> BenchClass:
    volume = rps * 60 * 100 / BENCH_STEPS[0][0]
    name = f"err{rate * 100:g}%_canary{rps:g}rps"
    return BenchClass(replace(CLASSES["steady"], name=name, volume=volume, error_rate=rate))


def bench_classes() -> dict[str, BenchClass]:
    """The grid most services run at, the tail, gap and outage cases, and the earlier classes."""
    out = [_rate_class(rate, rps) for rate in (0.001, 0.003, 0.01) for rps in (1, 5, 50)]
    heavy = CLASSES["heavy_tailed"]
    out += [
        BenchClass(
            replace(heavy, name="p99_only_canary50rps", volume=30_000.0),
            ("latency_tail",),
            "heavy tail (Pareto 1.3); the regression is +50% on the slowest 2% only",
        ),
        BenchClass(
            replace(heavy, name="p99_only_canary5rps", volume=3_000.0),
            ("latency_tail",),
            "as above at 5 canary requests/s",
        ),
        BenchClass(
            replace(CLASSES["steady"], name="zero_traffic_windows", zero_traffic_prob=0.3),
            note="30% of the windows carry no requests at all",
        ),
        BenchClass(
            replace(CLASSES["steady"], name="metrics_outage", outage=(12, 8)),
            note="the metrics source answers nothing for 8 minutes from minute 12",
        ),
    ]
    # The earlier benchmark's classes (3,000 requests a minute), for comparison with its figures.
    earlier = ("steady", "diurnal", "bursty", "retry_storm", "heavy_tailed", "low_traffic")
    earlier += ("canary_warmup", "noisy_baseline")
    out += [BenchClass(CLASSES[name]) for name in earlier]
    return {c.traffic.name: c for c in out}


@dataclass
class Streams:
    """Per tick (T, R) arrays of one class's simulated rollouts: what every judge reads."""

    req_b: np.ndarray
    err_b: np.ndarray
    req_c: np.ndarray
    err_c: np.ndarray
    p50_b: np.ndarray
    p99_b: np.ndarray
    p50_c: np.ndarray
    p99_c: np.ndarray
    median: list[TickCounts]
    tail: list[TickCounts]
    missing: np.ndarray
    kind: np.ndarray  # regression index per rollout (-1: healthy)

    def errors(self, t: int) -> TickCounts:
        return error_counts(self.req_b[t], self.err_b[t], self.req_c[t], self.err_c[t])

    @property
    def rollouts(self) -> int:
        return self.req_b.shape[1]

    def rows(self, rows: slice) -> Streams:
        """The streams of some of the rollouts."""
        fields = ("req_b", "err_b", "req_c", "err_c", "p50_b", "p99_b", "p50_c", "p99_c")
        counts = ("n_b", "n_c", "k", "c")
        return Streams(
            **{f: getattr(self, f)[:, rows] for f in (*fields, "missing")},
            median=[TickCounts(*(getattr(t, f)[rows] for f in counts)) for t in self.median],
            tail=[TickCounts(*(getattr(t, f)[rows] for f in counts)) for t in self.tail],
            kind=self.kind[rows],
        )


def _quantiles(lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = lat.shape[1]
    if m == 0:
        nan = np.full(lat.shape[0], np.nan)
        return nan, nan.copy()
    i50, i99 = int(0.5 * (m - 1)), int(0.99 * (m - 1))
    part = lat.copy()
    part.partition([i50, i99], axis=1)
    return part[:, i50], part[:, i99]


def simulate(
    bench: BenchClass,
    *,
    rollouts: int,
    seed: int,
    regression: str | None | tuple[str | None, ...],
    ticks: int = MAX_TICKS,
    watch: list = (),
) -> Streams:
    """Simulate `rollouts` rollouts of one class (one regression or none) for up to `ticks` ticks.

    `watch`: judges fed every tick as it is simulated (`KilnJudge`s). The simulation
    stops early (never before the planned steps end) once every watched judge is done:
    later ticks could change no judge's outcome.
    """
    sim = Simulator(
        bench.traffic, rollouts=rollouts, seed=seed, regression=regression, sample_cap=SAMPLE_CAP
    )
    cols: dict[str, list] = {k: [] for k in ("req_b", "err_b", "req_c", "err_c", "p50_b", "p99_b")}
    cols.update({k: [] for k in ("p50_c", "p99_c", "median", "tail", "missing")})
    for t in range(ticks):
        d = sim.tick(t, weight_at(BENCH_STEPS, t))
        for name in ("req_b", "err_b", "req_c", "err_c"):
            cols[name].append(getattr(d, name))
        p50_b, p99_b = _quantiles(d.lat_b)
        p50_c, p99_c = _quantiles(d.lat_c)
        for name, v in (("p50_b", p50_b), ("p99_b", p99_b), ("p50_c", p50_c), ("p99_c", p99_c)):
            cols[name].append(v)
        median, tail = rank_counts(d.lat_b, d.lat_c, (0.5, TAIL_QUANTILE))
        cols["median"].append(median)
        cols["tail"].append(tail)
        cols["missing"].append(np.zeros(rollouts, bool) if d.missing is None else d.missing)
        e = error_counts(d.req_b, d.err_b, d.req_c, d.err_c)
        for judge in watch:
            judge.update(e, median, tail, cols["missing"][-1], d.req_c)
        if watch and t + 1 >= HORIZON and all(j.done for j in watch):
            break
    arrays = {k: np.array(v) for k, v in cols.items() if k not in ("median", "tail")}
    kinds = regression if isinstance(regression, tuple) else (regression,) * rollouts
    return Streams(
        **arrays,
        median=cols["median"],
        tail=cols["tail"],
        kind=np.array([-1 if k is None else REGRESSIONS.index(k) for k in kinds]),
    )
