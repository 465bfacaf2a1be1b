"""The Istio traffic source as a real Prometheus stores it: scraped live, natively, and backfilled."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bench.canary.istio_source import ISTIO_BUCKETS_MS, History, IstioSource, native_index

SERIES = 'destination_service_name="search",destination_version="v1"'


def _values(server, query: str, **params) -> dict[str, float]:
    result = server.api("query", query=query, **params)["result"]
    return {
        r["metric"].get("response_code") or r["metric"].get("le", ""): float(r["value"][1])
        for r in result
    }


def test_a_scrape_stores_istio_counters_and_classic_buckets(istio_source, prometheus_factory):
    # 4 requests: 60, 70, 80 ms answered 200, one 300 ms answered 503.
    istio_source.observe("search", "shop", "v1", [60, 70, 80, 300], errors=1)
    server = prometheus_factory(targets=[istio_source.address], scrape_interval=1)
    server.wait_scrapes(1)
    requests = _values(server, f"istio_requests_total{{{SERIES}}}")
    assert requests == {"200": 3.0, "503": 1.0}
    buckets = _values(server, f"istio_request_duration_milliseconds_bucket{{{SERIES}}}")
    # Istio's default bounds, cumulative: nothing up to 50 ms, three up to 100, all four by 500.
    assert len(buckets) == len(ISTIO_BUCKETS_MS) + 1
    assert (buckets["50"], buckets["100"], buckets["250"], buckets["500"]) == (0, 3, 3, 4)
    assert buckets["+Inf"] == 4
    assert _values(server, f"istio_request_duration_milliseconds_sum{{{SERIES}}}") == {"": 510}
    assert server.version().startswith("2.")


def test_native_histograms_are_scraped_in_the_protobuf_exposition(prometheus_factory):
    source = IstioSource(native_schema=3).start()
    try:
        source.observe("search", "shop", "v1", [60, 70, 80, 300])
        server = prometheus_factory(
            targets=[source.address], scrape_interval=1, native_histograms=True
        )
        server.wait_scrapes(1)
        result = server.api("query", query=f"istio_request_duration_milliseconds{{{SERIES}}}")
        count_sum_buckets = result["result"][0]["histogram"][1]
        assert (count_sum_buckets["count"], count_sum_buckets["sum"]) == ("4", "510")
        # Schema 3: each bucket is (2^((i-1)/8), 2^(i/8)]; 60 ms lies in (58.69, 64].
        bounds = [(float(lo), float(hi)) for _, lo, hi, _ in count_sum_buckets["buckets"]]
        assert bounds[0] == pytest.approx((58.688, 64.0), abs=1e-3)
        assert len(bounds) == 4
        quantile = server.api(
            "query",
            query=f"histogram_quantile(0.5, istio_request_duration_milliseconds{{{SERIES}}})",
        )["result"][0]["value"][1]
        # The 2nd of 4 requests (70 ms) sits in (2^(49/8), 2^(50/8)] = (69.79, 76.11].
        assert 2 ** (49 / 8) < float(quantile) <= 2 ** (50 / 8) + 1e-9
    finally:
        source.stop()


def test_native_bucket_index_matches_prometheus_boundaries():
    # 2^(i/8) is the upper bound of bucket i at schema 3 (inclusive); just above it is bucket i+1.
    values = np.array([64.0, 64.0001, 1.0, 0.9999, 2 ** (3 / 8)])
    assert native_index(values, 3).tolist() == [48, 49, 0, 0, 3]


def test_backfilled_history_is_stored_at_its_exact_timestamps(prometheus_factory):
    source = IstioSource()
    history = History()
    start = int(time.time()) - 3 * 3600
    start -= start % 60
    for i in range(40):
        source.observe("search", "shop", "v1", [60.0] * 10, errors=1)
        history.record(source, start + 15 * i)
    server = prometheus_factory(scrape_interval=15, start=False)
    server.backfill(history.openmetrics())
    server.start()
    # At start + 15*10 (the 11th scrape) 110 requests were counted, 11 of them failed.
    at = start + 150
    assert _values(server, f"istio_requests_total{{{SERIES}}}", time=at) == {"200": 99, "503": 11}
    raw = server.api(
        "query", query=f"istio_requests_total{{{SERIES},response_code='200'}}[1m]", time=at
    )
    assert [v[0] for v in raw["result"][0]["values"]] == [at - 60, at - 45, at - 30, at - 15, at]
