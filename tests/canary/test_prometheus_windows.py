"""Exact, contiguous windows read from a real Prometheus: counter differences at fixed boundaries.

History is backfilled at exact timestamps (a 15 s scrape interval, one-minute ticks), so
each test knows precisely which requests every window must hold and needs no waiting.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import numpy as np
import pytest

from audit.models import OutboxEvent
from bench.canary.istio_source import History, IstioSource
from bench.canary.prometheus_server import scrape_epoch
from canary import prometheus, services
from canary.metrics import prometheus_windows
from canary.models import MetricsSource, RolloutDecision
from kiln.errors import InvalidInput, Unavailable
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
SCRAPE = 15.0
TICK = 60.0
SETTLE = 15.0


# --- the arithmetic ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "samples, expected",
    [
        # Opening value 10 at t=0 (the window is (0, 60]); 30 at t=60: 20 requests.
        ([(0, 10), (15, 12), (30, 20), (45, 25), (60, 30)], 20),
        # A reset after 45: 25 -> 4 means the restarted counter counted 4; 10 -> 25 -> +4 = 19.
        ([(0, 10), (15, 12), (45, 25), (60, 4)], 19),
        # A series born in the window (its first 5xx): counts from zero.
        ([(30, 2), (45, 3)], 3),
        # The sample at the window's end belongs to it; one past the end does not.
        ([(0, 1), (60, 5), (75, 9)], 4),
        # The sample at the window's start opens it and is not counted in it.
        ([(-15, 0), (0, 7), (30, 7)], 0),
    ],
    ids=["rise", "reset", "born", "end-inclusive", "start-exclusive"],
)
def test_counter_increase_counts_the_window_once(samples, expected):
    assert prometheus.counter_increase(samples, 0, 60) == expected


def test_consecutive_windows_sum_to_the_counter_whatever_the_boundaries():
    samples = [(15.0 * i, float(3 * i * i)) for i in range(30)]
    grid = [7.5 + 52.0 * k for k in range(9)]
    parts = [
        prometheus.counter_increase(samples, a, b) for a, b in zip(grid, grid[1:], strict=False)
    ]
    # Every sample in (grid[0], grid[-1]] counted once: the last value there minus the first.
    assert sum(parts) == 3 * 28**2 - 0


def test_tick_windows_are_contiguous():
    windows = [prometheus.tick_window(1000.0, 60.0, k, 15.0) for k in range(1, 6)]
    assert windows[0] == (985.0, 1045.0)  # (1000 + 0 - 15, 1000 + 60 - 15]
    assert all(a[1] == b[0] for a, b in zip(windows, windows[1:], strict=False))


@pytest.mark.parametrize(
    "text, seconds", [("15s", 15), ("1m30s", 90), ("500ms", 0.5), ("1h", 3600), ("x", None)]
)
def test_scrape_intervals_are_parsed(text, seconds):
    assert prometheus.parse_duration(text) == seconds


@pytest.mark.parametrize(
    "template, ok",
    [
        ('istio_requests_total{destination_version="{{version}}"}', True),
        ('{__name__="x",a="{{service}}"}', True),
        ('sum(increase(x{a="{{service}}"}[{{window}}]))', False),
        ('rate(x{a="b"}[5m])', False),
    ],
)
def test_only_series_selectors_are_read(template, ok):
    assert prometheus.is_selector(template) is ok


# --- against a real server -----------------------------------------------------------------


@pytest.fixture
def teams(db) -> dict[str, Team]:
    teams = {"payments": Team.objects.create(slug="payments", name="Payments")}
    own_namespace("shop", "payments")
    return teams


def _rollout(teams, settings, url: str, *, started_at: float, tick_seconds: float = TICK):
    settings.KILN_PROMETHEUS_URL = url
    settings.KILN_PROMETHEUS_SETTLE_SECONDS = SETTLE
    settings.KILN_PROMETHEUS_SCRAPE_SECONDS = SCRAPE  # a backfilled server scrapes no target
    service = services.service_create(
        actor=ADMIN,
        team=teams["payments"],
        name="search",
        namespace="shop",
        metrics_source=MetricsSource.PROMETHEUS,
    )
    rollout = services.rollout_create(
        actor=ADMIN,
        service=service,
        baseline_version="v1",
        canary_version="v2",
        tick_seconds=tick_seconds,
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    # The analysis started at `started_at`: its boundaries are started_at + k * tick - settle.
    RolloutDecision.objects.filter(rollout=rollout, kind="started").update(
        created_at=datetime.fromtimestamp(started_at, tz=UTC)
    )
    return rollout


@pytest.fixture
def history_server(prometheus_factory):
    """A server holding 20 minutes of backfilled scrapes every 15 s, with what each scrape saw."""
    source = IstioSource()
    history = History()
    start = int(time.time()) - 3 * 3600
    start -= start % 60
    seen = []  # (time, baseline requests, baseline errors, canary requests, canary errors)
    totals = [0, 0, 0, 0]
    for i in range(81):
        at = start + SCRAPE * i
        if i:
            # Between scrapes: 7 + i % 5 baseline requests (every 4th scrape one error), i % 3
            # canary requests at 60 ms (an error every 10th scrape).
            nb, eb = 7 + i % 5, int(i % 4 == 0)
            nc, ec = i % 3, int(i % 10 == 0 and i % 3 > 0)
            if i == 50:
                source.reset("search", "shop", "v2")  # the canary pod restarts after scrape 49
            source.observe("search", "shop", "v1", [60.0] * nb, errors=eb)
            if nc:
                source.observe("search", "shop", "v2", [60.0] * (nc - 1) + [300.0], errors=ec)
            totals = [totals[0] + nb, totals[1] + eb, totals[2] + nc, totals[3] + ec]
        history.record(source, at)
        seen.append((at, *totals))
    server = prometheus_factory(scrape_interval=SCRAPE, start=False)
    server.backfill(history.openmetrics())
    server.start()
    return server, start, seen


def _expected(seen, a: float, b: float) -> tuple[int, int, int, int]:
    before = [s for s in seen if s[0] <= a][-1]
    last = [s for s in seen if s[0] <= b][-1]
    return tuple(last[j] - before[j] for j in range(1, 5))


@pytest.mark.django_db
def test_every_tick_reads_exactly_its_window(teams, settings, history_server):
    server, start, seen = history_server
    # Started 37 s after the first scrape: boundaries fall between scrapes, never on them.
    rollout = _rollout(teams, settings, server.url, started_at=start + 37 + SETTLE)
    total = [0, 0, 0, 0]
    for tick in range(1, 20):
        a, b = start + 37 + (tick - 1) * TICK, start + 37 + tick * TICK
        baseline, canary, _ = prometheus_windows(rollout, tick)
        got = (baseline.requests, baseline.errors, canary.requests, canary.errors)
        # The canary restarted after scrape 49 (t=735): its counters dropped, nothing lost.
        assert got == _expected(seen, a, b), f"tick {tick}"
        assert canary.latencies_ms.size == canary.requests
        total = [t + g for t, g in zip(total, got, strict=True)]
    # Contiguous: the ticks together hold every request scraped in (start+37, start+37+19 min].
    assert tuple(total) == _expected(seen, start + 37, start + 37 + 19 * TICK)


@pytest.mark.django_db
def test_a_late_tick_reads_its_own_window_not_now(teams, settings, history_server):
    server, start, seen = history_server
    rollout = _rollout(teams, settings, server.url, started_at=start + SETTLE)
    first = prometheus_windows(rollout, 4, now=start + 4 * TICK + SETTLE)
    # The same tick read three hours late reads the same window, (180 s, 240 s].
    late = prometheus_windows(rollout, 4)
    assert (first[0].requests, first[1].requests) == (late[0].requests, late[1].requests)
    assert (late[0].requests, late[1].requests) == itemgetter_requests(
        _expected(seen, 180 + start, 240 + start)
    )


def itemgetter_requests(expected):
    return expected[0], expected[2]


@pytest.mark.django_db
def test_a_tick_that_runs_before_its_window_closes_reads_nothing(teams, settings, history_server):
    server, start, _ = history_server
    rollout = _rollout(teams, settings, server.url, started_at=start + SETTLE)
    with pytest.raises(Unavailable, match="before its window closed"):
        prometheus_windows(rollout, 2, now=start + 2 * TICK - 1)


@pytest.mark.django_db
def test_latency_buckets_are_counted_per_window_with_their_bounds(teams, settings, history_server):
    server, start, seen = history_server
    rollout = _rollout(teams, settings, server.url, started_at=start + SETTLE)
    _, canary, _ = prometheus_windows(rollout, 3)
    # Each canary batch is (n-1) requests at 60 ms and one at 300 ms: 60 sits at the 100 ms
    # bound, 300 at the 500 ms one.
    batches = sum(1 for i in range(1, 81) if 120 < SCRAPE * i <= 180 and i % 3)
    assert (canary.latencies_ms == 500.0).sum() == batches
    assert (canary.latencies_ms == 100.0).sum() == canary.requests - batches
    assert canary.bounds_ms[:8] == (0.5, 1, 5, 10, 25, 50, 100, 250)


@pytest.mark.django_db
def test_a_tick_shorter_than_the_scrape_interval_is_refused(
    teams, settings, istio_source, prometheus
):
    settings.KILN_PROMETHEUS_URL = prometheus.url
    service = services.service_create(
        actor=ADMIN,
        team=teams["payments"],
        name="search",
        namespace="shop",
        metrics_source=MetricsSource.PROMETHEUS,
    )
    before = OutboxEvent.objects.count()
    with pytest.raises(InvalidInput) as refused:
        services.rollout_create(
            actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", tick_seconds=1
        )
    (reason,) = refused.value.extra["fields"]["tick_seconds"]
    assert "scrape interval of 5 s" in reason and "smallest tick that works is 5 s" in reason
    assert OutboxEvent.objects.count() == before and not service.rollouts.exists()
    # One scrape interval is enough: every window then holds a scrape.
    services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", tick_seconds=5
    )


def test_classic_buckets_become_bounded_samples():
    # Cumulative buckets rose by 10 <= 50 ms, 30 <= 100 ms, 40 in all (+Inf at twice 100 ms).
    result = [
        {"metric": {"le": le}, "values": [[0, "0"], [60, n]]}
        for le, n in (("50", "10"), ("100", "30"), ("+Inf", "40"))
    ]
    histogram = prometheus.classic_histogram(result, 0, 60)
    assert histogram.counts == {(0.0, 50.0): 10, (50.0, 100.0): 20, (100.0, float("inf")): 10}
    assert np.array_equal(
        np.sort(histogram.samples(1000)), np.repeat([50.0, 100, 200], [10, 20, 10])
    )
    # Capped at 4 samples in proportion: 1, 2, 1.
    assert np.array_equal(np.sort(histogram.samples(4)), [50.0, 100.0, 100.0, 200.0])
    assert histogram.bounds() == (50.0, 100.0)


def test_a_latency_series_without_buckets_is_refused():
    result = [{"metric": {"pod": "a"}, "values": [[0, "1"], [60, "2"]]}]
    with pytest.raises(prometheus.ReadError, match="no `le` label"):
        prometheus.classic_histogram(result, 0, 60)


def test_several_series_are_summed_unless_they_count_the_same_requests_twice():
    pods = [
        {"metric": {"reporter": "destination", "pod": p}, "values": [[0, "5"], [30, str(5 + n)]]}
        for p, n in (("a", 3), ("b", 4))
    ]
    # Two pods of one version: each counted by its own difference.
    assert prometheus.counter_total(pods, 0, 60) == 7
    both_ends = [pods[0], {**pods[1], "metric": {"reporter": "source", "pod": "b"}}]
    with pytest.raises(prometheus.ReadError, match="several Istio reporters"):
        prometheus.counter_total(both_ends, 0, 60)


def test_native_histograms_are_read_bucket_by_bucket_per_window(prometheus_factory):
    source = IstioSource(native_schema=3).start()
    try:
        server = prometheus_factory(
            targets=[source.address], scrape_interval=1, native_histograms=True
        )
        source.observe("search", "shop", "v2", [60.0] * 5)
        server.wait_scrapes(1)
        t0 = time.time()
        # In the window: 3 at 70 ms, in (2^(49/8), 2^(50/8)] = (69.79, 76.11], and 2 at 300 ms.
        source.observe("search", "shop", "v2", [70.0, 70.0, 70.0, 300.0, 300.0])
        server.wait_scrapes(1)
        time.sleep(0.2)
        t1 = time.time()
        selector = (
            'istio_request_duration_milliseconds{destination_service_name="search",'
            'destination_version="v2"}'
        )
        histogram = prometheus.latency_histogram(
            prometheus.range_at(server.url, selector, t0, t1), t0, t1
        )
        assert histogram.native and histogram.total == 5
        counts = {round(hi, 2): c for (_, hi), c in histogram.counts.items()}
        assert counts == {round(2 ** (50 / 8), 2): 3, round(2 ** (66 / 8), 2): 2}
        # The window's resolution: the edges of the native buckets it holds.
        assert histogram.bounds()[:2] == pytest.approx((2 ** (49 / 8), 2 ** (50 / 8)))
    finally:
        source.stop()


def test_a_native_histogram_reset_counts_from_zero():
    a, b = (64.0, 69.79), (69.79, 76.11)
    samples = [(0.0, {a: 10.0, b: 4.0}), (30.0, {a: 12.0, b: 4.0}), (45.0, {a: 1.0, b: 2.0})]
    # (0, 60]: +2 in a, then a restart (a fell 12 -> 1): its 1 and 2 count whole.
    assert prometheus.histogram_increase(samples, 0, 60) == {a: 3.0, b: 2.0}


def test_a_scrape_stamp_is_read_to_the_nanosecond_and_never_is_none():
    assert scrape_epoch("2026-12-07T01:20:00.5Z") == pytest.approx(1796606400.5)
    assert scrape_epoch("2026-12-07T02:20:00.250000001+01:00") == pytest.approx(1796606400.25)
    assert scrape_epoch("2026-12-07T01:20:00Z") == 1796606400.0
    assert scrape_epoch("0001-01-01T00:00:00Z") is None
    assert scrape_epoch("") is None
