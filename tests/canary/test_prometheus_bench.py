"""The Prometheus benchmark's reads: what a real server scraped, read back per window, exactly once.

Against Debian's Prometheus scraping an Istio traffic source every second (classic
buckets on one server, native histograms of schema 3 on another).
"""

from __future__ import annotations

import time

import numpy as np

from bench.canary.istio_source import ISTIO_BUCKETS_MS, IstioSource
from bench.canary.prometheus_bench import (
    BASELINE,
    CANARY,
    NAMESPACE,
    _window,
    config,
    read_tick,
    wait_scraped_after,
)
from canary.sequential import evidence


def _serve(source: IstioSource, servers, *arms) -> float:
    """Serve each (version, latencies, errors), then return once every server has scraped it all."""
    for version, latencies, errors in arms:
        source.observe("svc", NAMESPACE, version, latencies, errors)
    served_at = time.time()
    wait_scraped_after(servers, served_at, timeout=10)
    time.sleep(0.5)
    return time.time()


def test_a_window_reads_exactly_what_was_served_and_knows_its_buckets(prometheus_factory):
    source = IstioSource(native_schema=3).start()
    try:
        classic = prometheus_factory(targets=[source.address], scrape_interval=1)
        native = prometheus_factory(
            targets=[source.address], scrape_interval=1, native_histograms=True
        )
        servers = [classic, native]
        # Earlier traffic, scraped before the window opens: it must not be counted in it.
        t0 = time.time()
        start = _serve(
            source, servers, (BASELINE, np.full(40, 60.0), 1), (CANARY, np.full(10, 60.0), 1)
        )
        rng = np.random.default_rng(1)
        # A 60 ms body 4% wide (the canary +25%): every request in Istio's (50, 100] bucket.
        end = _serve(
            source,
            servers,
            (BASELINE, rng.lognormal(np.log(60), 0.04, 900), 9),
            (CANARY, rng.lognormal(np.log(75), 0.04, 100), 3),
        )
        cfg = config()
        for server, is_native in ((classic, False), (native, True)):
            arms = read_tick(server, is_native, start, end)
            base, canary = arms[("svc", BASELINE)], arms[("svc", CANARY)]
            assert (base[0], base[1]) == (900, 9) and (canary[0], canary[1]) == (100, 3)
            assert base[2].native is is_native and base[2].total == 900
            ev = evidence(_window(base), _window(canary), cfg)
            median = ev.resolution["median"]
            if is_native:
                # Schema 3 buckets grow by 1.09: a +25% shift cannot hide in one.
                assert median["resolved"] is True
                assert median["bucket_ms"][1] / median["bucket_ms"][0] < 1.25
            else:
                assert median["resolved"] is False and median["bucket_ms"] == [50.0, 100.0]
                assert set(_window(base).bounds_ms) <= set(ISTIO_BUCKETS_MS)
        # Together with the window before it, every request served is counted once.
        before = read_tick(classic, False, t0 - 1.0, start)
        assert before[("svc", BASELINE)][:2] == (40, 1) and before[("svc", CANARY)][:2] == (10, 1)
    finally:
        source.stop()


def test_the_pooled_upper_bound_is_clopper_pearsons():
    from bench.canary.prometheus_summary import upper_bound_95

    # Known one-sided 95% Clopper-Pearson bounds: zero in 300 is the rule of three (~1%).
    assert upper_bound_95(0, 300) == 0.0099
    assert upper_bound_95(1, 100) == 0.0466
    assert upper_bound_95(5, 10) == 0.7776
    assert upper_bound_95(3, 3) == 1.0
    assert upper_bound_95(0, 0) is None
