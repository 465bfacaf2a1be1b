"""The kubernetes backend's client-side rate limit, as client-go keeps one."""

from __future__ import annotations

import threading
import time


class RateLimit:
    """client-go's client-side token bucket (`flowcontrol.NewTokenBucketRateLimiter`): `qps`
    requests per second on average, bursts of up to `burst`; `qps <= 0` is no limit.

    Kept explicit because a hidden client limit is what shapes a fleet-wide run's time
    (KILN_KUBE_QPS / KILN_KUBE_BURST, docs/cluster.md); `throttled_seconds` says how much.
    """

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, max(1, burst)
        self.tokens, self.at = float(self.burst), time.monotonic()
        self.throttled_seconds = 0.0
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Take one token, sleeping until it is there; returns the seconds slept."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = time.monotonic()
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.qps)
            self.at = now
            self.tokens -= 1.0
            delay = -self.tokens / self.qps if self.tokens < 0 else 0.0
            self.throttled_seconds += delay
        if delay:
            time.sleep(delay)
        return delay
