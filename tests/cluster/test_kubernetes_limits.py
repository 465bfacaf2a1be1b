"""The kubernetes client's limits are settings: a client-go token bucket (QPS, burst) in front
of every request and the connection pool size, against a real local HTTP API server."""

from __future__ import annotations

import os
import time

import pytest

from kiln.cluster import DeliveryError
from kiln.cluster.kubernetes import KubernetesBackend, RateLimit
from tests.cluster.fake_kube import RESOURCES, FakeKube


@pytest.fixture
def kube():
    fake = FakeKube().start()
    yield fake
    fake.stop()


def test_bucket_lets_a_burst_through_then_paces_at_qps():
    limit = RateLimit(qps=20, burst=3)
    started = time.monotonic()
    waits = [limit.wait() for _ in range(7)]
    # Three tokens at once, then one every 1/20 s: the four more take at least 4/20 s.
    assert waits[0] == 0.0
    assert time.monotonic() - started >= 0.2 * 0.99
    assert limit.throttled_seconds == pytest.approx(sum(waits))
    assert sum(waits) > 0


def test_qps_zero_is_no_limit():
    limit = RateLimit(qps=0, burst=1)
    assert [limit.wait() for _ in range(50)] == [0.0] * 50 and limit.throttled_seconds == 0


def test_backend_from_settings_takes_qps_burst_and_pool_size(settings, kube):
    settings.KILN_KUBE_API_URL = kube.url
    settings.KILN_KUBE_TOKEN_FILE = None
    settings.KILN_KUBE_CA_FILE = None
    settings.KILN_KUBE_QPS, settings.KILN_KUBE_BURST, settings.KILN_KUBE_POOL_SIZE = 25.0, 2, 3
    backend = KubernetesBackend.from_settings()
    assert backend.api.configuration.connection_pool_maxsize == 3
    assert (backend.rate_limit.qps, backend.rate_limit.burst) == (25.0, 2)
    taken = []
    wait = backend.rate_limit.wait
    backend.rate_limit.wait = lambda: taken.append(1) or wait()
    started = time.monotonic()
    for _ in range(6):  # real requests to the local API server (discovery too), through the bucket
        backend.get("v1", "Namespace", "", "nowhere")
    # However slow the requests, N of them through the bucket take at least (N - burst) / qps.
    assert len(taken) >= 6
    assert time.monotonic() - started >= (len(taken) - 2) / 25.0 * 0.99
    assert backend.rate_limit.throttled_seconds > 0


def test_the_backend_is_one_per_process_so_its_bucket_limits_the_process(
    settings, kube, monkeypatch
):
    settings.KILN_KUBE_API_URL = kube.url
    settings.KILN_KUBE_TOKEN_FILE = None
    settings.KILN_KUBE_CA_FILE = None
    settings.KILN_KUBE_QPS, settings.KILN_KUBE_BURST = 2.0, 1  # a second request waits ~0.5 s
    first = KubernetesBackend.from_settings()
    # get_backend() is called per operation: each call must share the bucket and the pool, or
    # every call would start with a full burst and KILN_KUBE_QPS would limit nothing.
    assert KubernetesBackend.from_settings() is first
    first.get("v1", "Namespace", "", "nowhere")
    first.get("v1", "Namespace", "", "nowhere")
    assert KubernetesBackend.from_settings().rate_limit.throttled_seconds > 0
    # The process names itself to the API server.
    assert {r["process"] for r in kube.requests} == {str(os.getpid())}
    # Other limits are another client; so is a forked child (another pid).
    settings.KILN_KUBE_QPS = 30.0
    second = KubernetesBackend.from_settings()
    assert second is not first and second.rate_limit.qps == 30.0
    monkeypatch.setattr(os, "getpid", lambda: -1)
    assert KubernetesBackend.from_settings() is not second


def test_a_kind_installed_after_discovery_is_found_by_discovering_again(
    settings, kube, monkeypatch
):
    settings.KILN_KUBE_API_URL = kube.url
    settings.KILN_KUBE_TOKEN_FILE = None
    settings.KILN_KUBE_CA_FILE = None
    settings.KILN_KUBE_QPS = 0.0
    backend = KubernetesBackend.from_settings()
    monkeypatch.setitem(RESOURCES, "example.kiln.dev/v1", [])
    with pytest.raises(DeliveryError, match="does not serve Widget"):
        backend.get("example.kiln.dev/v1", "Widget", "default", "w")
    # The CRD is installed: the long-lived backend sees it without a restart.
    RESOURCES["example.kiln.dev/v1"].append(("widgets", "Widget", True))
    assert backend.get("example.kiln.dev/v1", "Widget", "default", "w") is None
