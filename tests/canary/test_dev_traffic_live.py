"""make dev's traffic through a real Prometheus: the canary's share read in a rollout's own window.

The development traffic loop serves a Prometheus-read service at the weight of its running
rollout, Debian's Prometheus scrapes it every 5 s, and the rollout's first tick is read
with the exact-window reader (canary.metrics.prometheus_windows): the canary's share of
the requests counted there is the rollout's weight within sampling error.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from bench.canary.dev_traffic import DevTraffic
from bench.canary.istio_source import IstioSource
from bench.management.commands.canary_dev_traffic import dev_routes
from canary import services
from canary.forms import RolloutStartForm
from canary.metrics import prometheus_windows, tick_seconds_errors
from canary.models import MetricsSource, RolloutDecision
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
TICK = 10.0  # two scrape intervals
SETTLE = 1.0
WARMUP = 6.0  # seconds served before the window opens: at least one scrape precedes it


@pytest.mark.django_db
def test_the_canary_share_read_through_prometheus_is_the_rollout_weight(
    settings, prometheus_factory
):
    source = IstioSource().start()
    try:
        server = prometheus_factory(targets=[source.address])
        settings.KILN_PROMETHEUS_URL = server.url
        settings.KILN_PROMETHEUS_SETTLE_SECONDS = SETTLE
        team = Team.objects.create(slug="payments", name="Payments")
        own_namespace("shop", "payments")
        service = services.service_create(
            actor=ADMIN,
            team=team,
            name="search",
            namespace="shop",
            metrics_source=MetricsSource.PROMETHEUS,
            sim_traffic_class="high_volume",
        )
        # The rollout form's default tick is long enough for this server's scrape interval.
        default_tick = RolloutStartForm.base_fields["tick_seconds"].initial
        assert tick_seconds_errors(service, default_tick) == []
        assert tick_seconds_errors(service, 1) != []
        rollout = services.rollout_create(
            actor=ADMIN,
            service=service,
            baseline_version="v1",
            canary_version="v2",
            steps=[25, 50, 100],
            tick_seconds=TICK,
        )
        services.rollout_tick(rollout_id=rollout.pk, tick=0)  # started: the canary at 25%
        rollout.refresh_from_db()
        assert rollout.weight == 25

        served_from = time.time()
        # Tick 1's window is (T - settle, T + tick - settle] for the start decision's time T:
        # it opens WARMUP seconds into the traffic and closes TICK seconds later.
        opens = served_from + WARMUP
        RolloutDecision.objects.filter(rollout=rollout, kind="started").update(
            created_at=datetime.fromtimestamp(opens + SETTLE, tz=UTC)
        )
        closes = opens + TICK
        DevTraffic(source, seed=7).run(dev_routes, stop=lambda: time.time() > closes + 1)
        while time.time() < closes + SETTLE + 0.2:
            time.sleep(0.1)

        baseline, canary, weight = prometheus_windows(rollout, 1)
    finally:
        source.stop()
    assert weight == 25
    total = baseline.requests + canary.requests
    # ~500 requests a second for the window's two scrape intervals: ~5,000 counted. The share
    # is binomial (sd sqrt(0.25 x 0.75 / n) ~ 0.6 points) widened by the minute's own Poisson
    # draw of each arm (~0.3 points): 4 sd of the sum stay under 3 points.
    assert total > 3000
    sd = (0.25 * 0.75 / total) ** 0.5 * 1.2
    assert abs(canary.requests / total - 0.25) < 4 * sd
    # The errors are the class's 1%, each arm's counted in its own window.
    assert 0 < baseline.errors < 0.03 * baseline.requests
    assert 0 < canary.errors < 0.03 * canary.requests
