"""The canary benchmark measured through a real Prometheus: source -> scrape -> PromQL -> analyzer.

Every rollout of every traffic class is a service of its own in one Istio traffic
source (`istio_source.IstioSource`, native histograms of schema 3 beside Istio's
default buckets). Two Debian Prometheus servers scrape it every `scrape_seconds`:
`classic` (the text exposition: Istio's default buckets) and `native` (the protobuf
exposition with `--enable-feature=native-histograms`). Time is compressed: one tick
carries one simulated minute of the benchmark's traffic (`streams.BENCH_STEPS`, the same
classes and regressions as `canary_bench`) and lasts as long as serving it and one
scrape of it take.

Boundaries. Tick k's traffic is served after t_{k-1}; t_k is set once both servers have
finished a scrape that *started* after the last of it was served (their `lastScrape`),
so every request of tick k is in a sample stamped inside (t_{k-1}, t_k] and none of tick
k+1's is. Each server is then asked once for the raw samples of every series over the
window, evaluated at t_k, and each arm's window is read with the exact-window reader's
own arithmetic (`canary.prometheus`: counter differences at the boundaries, resets
handled, no extrapolation; histogram buckets the same way). The windows, with their bucket bounds,
go through `canary.sequential` exactly as a rollout's do (`evidence`, `Analyzer`). The
same simulated traffic is also judged from exact counts and the raw latency of every
request (`exact`: what `canary_bench` measures, with every request's latency rather than
its 1,000-sample reservoir), so the table sets both side by side; the requests Prometheus
counted are checked against the requests served.

Constants: the engine's defaults, which `canary_bench` chose on its "tune" seeds; this
benchmark runs on the "report" seeds and tunes nothing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from bench.canary.istio_source import DURATION, REQUESTS, IstioSource
from bench.canary.prometheus_server import PrometheusServer
from bench.canary.prometheus_summary import KINDS, pooled, summarise
from bench.canary.streams import BENCH_STEPS, HORIZON, MAX_TICKS, SEED_SETS, BenchClass
from canary.prometheus import ReadError, api_get, classic_histogram, counter_total
from canary.prometheus import native_histogram as read_native_histogram
from canary.sequential import PROMOTE, ROLLBACK, AnalysisConfig, Analyzer, Decision, Window
from canary.sequential import evidence as tick_evidence
from canary.simulated_traffic import Simulator
from canary.traffic import weight_at

NAMESPACE = "bench"
BASELINE, CANARY = "v1", "v2"
NATIVE_SCHEMA = 3
READ_CAP = 60_000  # latency samples per arm from a histogram (the metrics module's cap)
SIM_SAMPLE_CAP = 60_000  # a latency per nominal request of the busiest class (27,000 a minute)


@dataclass
class Rollout:
    """One benchmark rollout: its service, whether its canary regressed, and its judges."""

    service: str
    cls: str
    row: int
    regression: str | None
    judges: dict[str, Analyzer] = field(default_factory=dict)
    decided: dict[str, tuple[str, int]] = field(default_factory=dict)  # judge -> (action, tick)
    unresolved: dict[str, bool] = field(default_factory=dict)  # kind -> a held latency channel
    served: float = 0.0  # requests served to both arms
    counted: dict[str, float] = field(default_factory=dict)  # kind -> requests Prometheus counted

    def open(self, judge: str) -> bool:
        """Whether `judge` has not decided this rollout yet."""
        return judge not in self.decided


def config() -> AnalysisConfig:
    """The engine as the benchmark's rollouts run it (the defaults, the benchmark's steps)."""
    return AnalysisConfig(horizon_ticks=HORIZON, max_ticks=MAX_TICKS)


def _group(result: list[dict], *labels: str) -> dict[tuple[str, ...], list[dict]]:
    out: dict[tuple[str, ...], list[dict]] = defaultdict(list)
    for series in result:
        metric = series.get("metric") or {}
        out[tuple(metric.get(name, "") for name in labels)].append(series)
    return out


def read_tick(
    server: PrometheusServer, native: bool, start: float, end: float, lookback: float = 30.0
) -> dict:
    """Every arm's window (t_{k-1}, t_k]: {(service, version): (requests, errors, histogram)}.

    Two queries for all rollouts at once (raw samples of every series, evaluated at
    `end`, reaching `lookback` seconds before `start` for the opening sample); each arm
    is then read with `canary.prometheus`'s arithmetic. An arm whose window cannot be
    read maps to the ReadError.
    """
    span_ms = int(round((end - start + lookback) * 1000))
    at = f"{end:.3f}"
    timeout = max(30.0, end - start)
    keys = ("destination_service_name", "destination_version")
    requests = api_get(
        server.url, "query", {"query": f"{REQUESTS}[{span_ms}ms]", "time": at}, timeout
    )
    metric = DURATION if native else f"{DURATION}_bucket"
    latency = api_get(server.url, "query", {"query": f"{metric}[{span_ms}ms]", "time": at}, timeout)
    by_arm = _group(requests.get("result") or [], *keys)
    hist_by_arm = _group(latency.get("result") or [], *keys)
    out: dict = {}
    for arm, series in by_arm.items():
        try:
            total = counter_total(series, start, end)
            errors = [
                s for s in series if (s.get("metric") or {}).get("response_code", "")[:1] == "5"
            ]
            failed = counter_total(errors, start, end) if errors else 0.0
            read = read_native_histogram if native else classic_histogram
            hist = read(hist_by_arm.get(arm, []), start, end)
            out[arm] = (total, failed, hist)
        except ReadError as exc:
            out[arm] = exc
    return out


def served(sample: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """A latency for each of the `n` requests served: the simulated sample's own, one each.

    The simulator draws a latency per nominal request (`SIM_SAMPLE_CAP` covers every class);
    only requests beyond the nominal count (a burst) reuse one. Resampling a small sample
    for every request would repeat each latency many times, and the histogram would count
    copies as independent evidence.
    """
    if not n or not sample.size:
        return np.zeros(0)
    if n <= sample.size:
        return sample[:n]
    return np.concatenate([sample, rng.choice(sample, n - sample.size)])


def _window(read: object) -> Window | None:
    if not isinstance(read, tuple):
        return None
    total, failed, hist = read
    requests = int(round(total))
    bounds = hist.bounds()
    return Window(
        requests,
        min(int(round(failed)), requests),
        hist.samples(READ_CAP),
        bounds_ms=bounds or None,
    )


def _observe(rollout: Rollout, judge: str, decision: Decision, tick: int) -> None:
    if decision.action in (PROMOTE, ROLLBACK) or decision.action == "inconclusive":
        rollout.decided[judge] = (decision.action, tick)
    if judge in KINDS:
        held = any(not c.get("resolved", True) for c in decision.channels.values())
        rollout.unresolved[judge] = rollout.unresolved.get(judge, False) or held


def wait_scraped_after(servers: list[PrometheusServer], after: float, timeout: float) -> None:
    """Wait until every server has committed a successful scrape of every target that started
    after `after` (a failed scrape stores nothing: the next one must carry the traffic). Read
    from `up`'s own samples, written in the commit that stores the scrape's: the targets list
    names a scrape a moment before its samples can be read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fresh = []
        for server in servers:
            stamps = server.scrape_stamps(healthy=True)
            fresh += [stamps.get(target, 0.0) > after for target in server.targets]
        if fresh and all(fresh):
            return
        time.sleep(0.1)
    raise TimeoutError(f"no successful scrape after {after:.3f} within {timeout:g} s")


def run(
    classes: dict[str, BenchClass],
    *,
    rollouts: int,
    scrape_seconds: float,
    seed: int = SEED_SETS["report"],
    log=print,
) -> dict:
    """Run `rollouts` healthy and `rollouts` regressed rollouts per class through both servers."""
    cfg = config()
    source = IstioSource(native_schema=NATIVE_SCHEMA).start()
    servers = {
        kind: PrometheusServer(
            targets=[source.address],
            scrape_interval=scrape_seconds,
            native_histograms=kind == "native",
        )
        for kind in KINDS
    }
    try:
        for server in servers.values():
            server.start()
        version = servers["classic"].version()
        sims: dict[str, Simulator] = {}
        plan: list[Rollout] = []
        for ci, (name, bench) in enumerate(classes.items()):
            kinds = (None,) * rollouts + tuple(
                bench.regressions[i % len(bench.regressions)] for i in range(rollouts)
            )
            sims[name] = Simulator(
                bench.traffic,
                rollouts=2 * rollouts,
                seed=seed + ci,
                regression=kinds,
                sample_cap=SIM_SAMPLE_CAP,
            )
            for row, regression in enumerate(kinds):
                r = Rollout(f"c{ci}-r{row}", name, row, regression)
                r.judges = {judge: Analyzer(cfg) for judge in ("exact", *KINDS)}
                plan.append(r)
        by_class = defaultdict(list)
        for r in plan:
            by_class[r.cls].append(r)
        # Both servers must have scraped the (empty) source before the first boundary.
        for server in servers.values():
            server.wait_scrapes(1)
        started = time.monotonic()
        end = time.time()
        seconds_per_tick = []
        retired: set[str] = set()
        for tick in range(1, MAX_TICKS + 1):
            start = end
            weight = weight_at(BENCH_STEPS, tick - 1)
            missing_rows: dict[str, np.ndarray] = {}
            for name, sim in sims.items():
                live = [r for r in by_class[name] if any(r.open(j) for j in r.judges)]
                if not live:
                    continue
                d = sim.tick(tick - 1, weight)
                missing_rows[name] = d.missing if d.missing is not None else np.zeros(0, bool)
                rng = np.random.default_rng([seed, tick, 99])
                for r in live:
                    windows = []
                    scraped = any(r.open(kind) for kind in KINDS)
                    for version_, req, err, lat in (
                        (BASELINE, d.req_b, d.err_b, d.lat_b),
                        (CANARY, d.req_c, d.err_c, d.lat_c),
                    ):
                        n, e, sample = int(req[r.row]), int(err[r.row]), lat[r.row]
                        windows.append(Window(n, min(e, n), sample))
                        if scraped:
                            latencies = served(sample, n, rng)
                            source.observe(r.service, NAMESPACE, version_, latencies, min(e, n))
                            r.served += n
                    outage = missing_rows[name].size and missing_rows[name][r.row]
                    if r.open("exact"):
                        exact = r.judges["exact"]
                        dec = exact.update(None, None) if outage else exact.update(*windows)
                        _observe(r, "exact", dec, tick)
            for r in plan:
                if not any(r.open(kind) for kind in KINDS) and r.service not in retired:
                    # Decided through both servers: its pods go away (the series go stale), so
                    # the scrapes of the rollouts still running stay small.
                    retired.add(r.service)
                    for version_ in (BASELINE, CANARY):
                        source.remove(r.service, NAMESPACE, version_)
            served_at = time.time()
            wait_scraped_after(list(servers.values()), served_at, timeout=6 * scrape_seconds)
            end = time.time()
            seconds_per_tick.append(end - start)
            for kind, server in servers.items():
                try:
                    arms = read_tick(
                        server, kind == "native", start, end, lookback=3 * scrape_seconds
                    )
                except ReadError as exc:
                    arms = defaultdict(lambda exc=exc: exc)
                for r in plan:
                    b = arms.get((r.service, BASELINE))
                    c = arms.get((r.service, CANARY))
                    for read in (b, c):
                        if isinstance(read, tuple):
                            r.counted[kind] = r.counted.get(kind, 0.0) + read[0]
                    if not r.open(kind):
                        continue
                    outage = missing_rows.get(r.cls, np.zeros(0, bool))
                    if (outage.size and outage[r.row]) or b is None or c is None:
                        dec = r.judges[kind].update(None, None)
                    else:
                        wb, wc = _window(b), _window(c)
                        if wb is None or wc is None:
                            dec = r.judges[kind].update(None, None)
                        else:
                            dec = r.judges[kind].observe(tick_evidence(wb, wc, cfg))
                    _observe(r, kind, dec, tick)
            open_ = sum(1 for r in plan for j in r.judges if r.open(j))
            log(f"tick {tick}: {open_} judgements open, {time.monotonic() - started:.0f} s")
            if not open_:
                break
        return {
            "prometheus_version": version,
            "scrape_interval_seconds": scrape_seconds,
            "real_seconds_per_tick": {
                "median": round(float(np.median(seconds_per_tick)), 1),
                "max": round(float(np.max(seconds_per_tick)), 1),
            },
            "native_schema": NATIVE_SCHEMA,
            "classes": {name: summarise(by_class[name]) for name in classes},
            "pooled": pooled([r for name in classes for r in by_class[name]]),
            "wall_seconds": round(time.monotonic() - started, 1),
        }
    finally:
        for server in servers.values():
            server.close()
        source.stop()
