"""The Prometheus benchmark's reads: what a real server scraped, read back per window, exactly once.

Against Debian's Prometheus scraping an Istio traffic source every second (classic
buckets on one server, native histograms of schema 3 on another).
"""

from __future__ import annotations

import time

import numpy as np

from canary.bench.istio_source import ISTIO_BUCKETS_MS, IstioSource
from canary.bench.prometheus_bench import BASELINE, CANARY, NAMESPACE, _window, config, read_tick
from canary.sequential import evidence


def _serve_window(source: IstioSource, start: float, end: float, servers) -> None:
    """Serve known traffic just after `start`, then wait until the window is closed and stored."""
    while time.time() < start:
        time.sleep(0.05)
    rng = np.random.default_rng(1)
    # 60 ms body, 4% wide: every request of both arms in Istio's (50, 100] bucket.
    source.observe("svc", NAMESPACE, BASELINE, rng.lognormal(np.log(60), 0.04, 900), errors=9)
    source.observe("svc", NAMESPACE, CANARY, rng.lognormal(np.log(75), 0.04, 100), errors=3)
    while time.time() < end + 1.5:
        time.sleep(0.05)


def test_a_window_reads_exactly_what_was_served_and_knows_its_buckets(prometheus_factory):
    source = IstioSource(native_schema=3).start()
    try:
        classic = prometheus_factory(targets=[source.address], scrape_interval=1)
        native = prometheus_factory(
            targets=[source.address], scrape_interval=1, native_histograms=True
        )
        # Earlier traffic, scraped before the window opens: it must not be counted in it.
        source.observe("svc", NAMESPACE, BASELINE, np.full(40, 60.0), 1)
        source.observe("svc", NAMESPACE, CANARY, np.full(10, 60.0), 1)
        classic.wait_scrapes(2)
        native.wait_scrapes(2)
        start = float(int(time.time()) + 1)
        end = start + 3.0
        _serve_window(source, start, end, (classic, native))
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
        before = read_tick(classic, False, start - 30.0, start)
        assert before[("svc", BASELINE)][:2] == (40, 1) and before[("svc", CANARY)][:2] == (10, 1)
    finally:
        source.stop()
