"""Live scraping at a realistic interval: a target that goes down or is dropped, a canary pod
replaced by a new one. Each window either counts every scraped request once or is refused."""

from __future__ import annotations

import time

import pytest

from bench.canary.istio_source import IstioSource
from canary import prometheus as reader
from canary import promql
from canary.metrics import DEFAULT_QUERIES

VALUES = {"service": "search", "namespace": "shop", "host": "search.shop.svc.cluster.local"}


def _requests(server, version: str, start: float, end: float) -> float:
    selector = promql.render(
        DEFAULT_QUERIES["requests"], {**VALUES, "version": version, "window": "5s"}
    )
    return reader.counter_total(reader.range_at(server.url, selector, start, end), start, end)


def _serve(source: IstioSource, version: str, n: int) -> None:
    source.observe("search", "shop", version, [60.0] * n)


@pytest.mark.parametrize("how", ["target-down", "target-dropped"])
def test_a_window_in_which_the_target_was_not_scraped_is_refused(istio_source, prometheus, how):
    _serve(istio_source, "v1", 5)
    prometheus.wait_scrapes(1)
    t0 = time.time()
    if how == "target-down":
        istio_source.down = True  # scrapes fail: Prometheus marks the series stale
    else:
        prometheus.set_targets([])  # the pod is gone from discovery
        # Its scrape loop stops (writing the stale markers) once the reload has taken: wait for
        # that on the server rather than trust a fixed time to cover it on a loaded machine.
        deadline = time.monotonic() + 30
        while istio_source.address in prometheus.last_scrapes():
            assert time.monotonic() < deadline, "the dropped target stayed active"
            time.sleep(0.1)
    _serve(istio_source, "v1", 3)
    time.sleep(2 * prometheus.scrape_interval + 1)
    t1 = time.time()
    with pytest.raises(reader.ReadError, match="target is down or its series are stale"):
        _requests(prometheus, "v1", t0, t1)
    # Back again: the next window counts what the target served meanwhile, nothing lost.
    istio_source.down = False
    prometheus.set_targets([istio_source.address])
    _serve(istio_source, "v1", 4)
    prometheus.wait_scrapes(1)
    time.sleep(0.5)
    assert _requests(prometheus, "v1", t1, time.time()) == 7


def test_a_replaced_canary_pod_counts_both_pods_once(istio_source, prometheus):
    _serve(istio_source, "v1", 10)
    _serve(istio_source, "v2", 5)
    prometheus.wait_scrapes(1)
    t0 = time.time()
    _serve(istio_source, "v2", 3)
    _serve(istio_source, "v1", 6)
    prometheus.wait_scrapes(1)
    # The canary pod is replaced: the old one's series vanish, a new pod (another target)
    # counts from zero. The window sees both pods' series: 3 + 4 requests.
    istio_source.remove("search", "shop", "v2")
    new_pod = IstioSource().start()
    try:
        _serve(new_pod, "v2", 4)
        prometheus.set_targets([istio_source.address, new_pod.address])
        prometheus.wait_scrapes(1)
        time.sleep(0.5)
        t1 = time.time()
        assert _requests(prometheus, "v2", t0, t1) == 7
        assert _requests(prometheus, "v1", t0, t1) == 6
    finally:
        new_pod.stop()


def test_waiting_for_a_scrape_waits_for_its_samples_and_skips_failed_scrapes(
    istio_source, prometheus
):
    _serve(istio_source, "v1", 2)
    prometheus.wait_scrapes(1)
    # The scrape counted has committed what it read: its samples answer at once.
    assert prometheus.api("query", query="istio_requests_total")["result"]
    # A failed scrape (the target down) is a scrape, but not one that read anything.
    istio_source.down = True
    prometheus.wait_scrapes(1, healthy=False)
    with pytest.raises(TimeoutError, match="not scraped healthily"):
        prometheus.wait_scrapes(1, timeout=3)
    istio_source.down = False
    prometheus.wait_scrapes(1)
