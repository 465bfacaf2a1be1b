"""The kubernetes client's limits are settings: a client-go token bucket (QPS, burst) in front
of every request and the connection pool size, against a real local HTTP API server."""

from __future__ import annotations

import time

import pytest

from kiln.cluster.kubernetes import KubernetesBackend, RateLimit
from tests.cluster.fake_kube import FakeKube


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
