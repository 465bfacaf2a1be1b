"""Development traffic for `make dev`: services' versions served through an Istio traffic source.

Each second, every route (one service: its traffic class, its two versions and the
canary's percent of traffic) serves that second's requests into an `IstioSource`, which
a real Prometheus scrapes; Kiln then reads the rollout's windows from that server, as
it would read a mesh's. The rates, errors and latencies come from the service's
traffic class (canary.simulated_traffic): a simulated tick is one minute, so a second
serves a sixtieth of the minute's requests. The minute's counts, error rates and
latency sample are simulated once per (minute, weight); each second then draws its own
requests from them (Poisson counts, binomial errors, latencies resampled from the
minute's sample), so consecutive seconds are independent draws of the same minute.

The canary's percent is what the caller reads each second (the rollout's current
weight), so the split follows a rollout step by step. Development only: no product
code imports this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from bench.canary.istio_source import IstioSource
from canary.simulated_traffic import CLASSES, MAX_TICKS, Simulator, TickData

SECONDS_PER_TICK = 60.0  # a simulated tick of canary.simulated_traffic is one minute
SAMPLE_CAP = 2000  # latency sample per arm and minute, resampled by each second


@dataclass(frozen=True)
class Route:
    """How one service's traffic is split now: the canary version gets `weight` percent."""

    service: str
    namespace: str
    traffic_class: str
    baseline: str
    canary: str
    weight: int
    regression: str | None = None  # the canary version's simulated regression
    seed: int = 0
    started: float = 0.0  # unix seconds: minute 0 of the class's episodes (bursts, warm-up)

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, service): one route per service."""
        return (self.namespace, self.service)


def simulated_minute(route: Route, now: float) -> int:
    """The simulated tick (minute) of `route` at unix time `now`, kept within the episode table.

    The class's episodes are drawn for MAX_TICKS minutes; later minutes cycle through its
    second half, so a long-running source neither freezes on the last minute's episode
    nor replays the first minutes' canary warm-up.
    """
    minute = max(0, int((now - route.started) // SECONDS_PER_TICK))
    if minute < MAX_TICKS:
        return minute
    half = MAX_TICKS // 2
    return half + (minute - half) % half


class DevTraffic:
    """Serves each second of every route into `source`, one version's requests per arm."""

    def __init__(self, source: IstioSource, *, seed: int = 0, sample_cap: int = SAMPLE_CAP) -> None:
        """`seed` fixes the per-second draws (the minutes follow each route's own seed)."""
        self.source = source
        self.sample_cap = sample_cap
        self.rng = np.random.default_rng([seed, 424242])
        self._minutes: dict[tuple[str, str], tuple[tuple, TickData]] = {}

    def minute(self, route: Route, now: float) -> TickData:
        """The simulated minute `route` is in at `now` (cached per route, minute and weight)."""
        index = simulated_minute(route, now)
        key = (index, route.weight, route.traffic_class, route.regression, route.seed)
        cached = self._minutes.get(route.key)
        if cached is not None and cached[0] == key:
            return cached[1]
        sim = Simulator(
            CLASSES.get(route.traffic_class, CLASSES["steady"]),
            seed=route.seed,
            regression=route.regression,
            sample_cap=self.sample_cap,
        )
        data = sim.tick(index, route.weight)
        self._minutes[route.key] = (key, data)
        return data

    def serve(
        self, routes: Iterable[Route], now: float
    ) -> dict[tuple[str, str, str], tuple[int, int]]:
        """Serve one second of every route at unix time `now`; (requests, errors) per (namespace, service, version)."""
        served: dict[tuple[str, str, str], tuple[int, int]] = {}
        for route in routes:
            data = self.minute(route, now)
            arms = [(route.baseline, data.req_b, data.err_b, data.lat_b)]
            if route.canary != route.baseline:
                arms.append((route.canary, data.req_c, data.err_c, data.lat_c))
            for version, req, err, lat in arms:
                per_minute, sample = float(req[0]), lat[0]
                # Without a latency sample this minute the arm had no requests to draw from.
                n = int(self.rng.poisson(per_minute / SECONDS_PER_TICK)) if sample.size else 0
                error_rate = float(err[0]) / per_minute if per_minute > 0 else 0.0
                errors = int(self.rng.binomial(n, min(1.0, error_rate))) if n else 0
                latencies = self.rng.choice(sample, n) if n else np.zeros(0)
                self.source.observe(route.service, route.namespace, version, latencies, errors)
                served[(route.namespace, route.service, version)] = (n, errors)
        return served

    def run(
        self,
        read_routes: Callable[[], list[Route]],
        *,
        stop: Callable[[], bool] = lambda: False,
        period: float = 1.0,
        on_routes: Callable[[list[Route]], None] | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> int:
        """Every `period` seconds read the routes and serve that second, until `stop()`; returns seconds served.

        The loop keeps to wall-clock period boundaries, so a slow read shortens the next
        wait instead of slowing the rate. `on_routes` hears of every change of the routes.
        """
        served = 0
        previous: list[Route] | None = None
        next_at = clock()
        while not stop():
            routes = read_routes()
            if on_routes is not None and routes != previous:
                on_routes(routes)
            previous = routes
            self.serve(routes, clock())
            served += 1
            next_at += period
            delay = next_at - clock()
            if delay > 0:
                sleep(delay)
            else:
                next_at = clock()  # fell behind (a long read): start again from now
        return served
