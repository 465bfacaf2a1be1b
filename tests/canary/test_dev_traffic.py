"""make dev's traffic: each second serves a service's versions split by its rollout's current weight."""

from __future__ import annotations

import io
import signal

import pytest
from django.core.management import CommandError, call_command

from bench.canary.dev_traffic import SECONDS_PER_TICK, DevTraffic, Route, simulated_minute
from bench.canary.istio_source import IstioSource
from bench.canary.prometheus_server import free_port
from bench.management.commands.canary_dev_traffic import dev_routes
from canary import services
from canary.models import MetricsSource, Rollout, Service
from canary.seed import PROMETHEUS_DEMO, seed_prometheus_demo
from canary.simulated_traffic import CLASSES, MAX_TICKS
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))


def _route(weight: int, *, canary: str = "v2", traffic_class: str = "high_volume") -> Route:
    return Route("search", "shop", traffic_class, "v1", canary, weight)


def _serve(traffic: DevTraffic, route: Route, seconds: int) -> dict[str, int]:
    totals: dict[str, int] = {}
    for second in range(seconds):
        for (_, _, version), (n, _) in traffic.serve([route], 1000.0 + second).items():
            totals[version] = totals.get(version, 0) + n
    return totals


def test_a_second_serves_a_sixtieth_of_the_class_minute_split_by_the_weight():
    source = IstioSource()
    totals = _serve(DevTraffic(source), _route(25), 60)
    # high_volume: 30,000 requests a minute, 25% to the canary: 7,500 and 22,500 expected.
    # Poisson counts: sd sqrt(7,500) ~ 87 and sqrt(22,500) = 150, doubled by the minute's own
    # draw; 6 sd bounds.
    volume = CLASSES["high_volume"].volume
    assert abs(totals["v2"] - 0.25 * volume) < 6 * 2 * (0.25 * volume) ** 0.5
    assert abs(totals["v1"] - 0.75 * volume) < 6 * 2 * (0.75 * volume) ** 0.5
    # What was served is what the source exposes for Prometheus to scrape.
    counts = {a.version: sum(a.codes.values()) for a in source.snapshot()}
    assert counts == totals


@pytest.mark.parametrize(
    "weight, canary, versions",
    [(0, "v2", {"v1"}), (100, "v2", {"v2"}), (0, "v1", {"v1"})],
    ids=["not-started", "promoted", "no-rollout"],
)
def test_only_versions_with_a_share_get_requests(weight, canary, versions):
    totals = _serve(DevTraffic(IstioSource()), _route(weight, canary=canary), 5)
    assert {v for v, n in totals.items() if n} == versions


def test_errors_follow_the_canary_regression():
    source = IstioSource()
    traffic = DevTraffic(source)
    route = Route("search", "shop", "high_volume", "v1", "v2", 50, regression="errors")
    errors = {"v1": 0, "v2": 0}
    for second in range(60):
        for (_, _, version), (_, e) in traffic.serve([route], 1000.0 + second).items():
            errors[version] += e
    # 1% errors in the baseline, 2% in the canary on ~15,000 requests each: ~150 against ~300.
    assert errors["v2"] > 1.5 * errors["v1"] > 0


@pytest.mark.parametrize(
    "elapsed_minutes, minute",
    # Minute k of the route while k < MAX_TICKS; later ones cycle through the table's second
    # half: 256 -> 128 + (256 - 128) % 128 = 128, 300 -> 128 + 172 % 128 = 172.
    [(0, 0), (5, 5), (MAX_TICKS - 1, MAX_TICKS - 1), (MAX_TICKS, 128), (300, 172)],
    ids=["first", "fifth", "last", "wrap", "later"],
)
def test_simulated_minutes_stay_within_the_episode_table(elapsed_minutes, minute):
    route = Route("search", "shop", "steady", "v1", "v2", 5, started=1000.0)
    assert simulated_minute(route, 1000.0 + elapsed_minutes * SECONDS_PER_TICK + 1) == minute


def test_the_loop_reads_the_routes_every_second_and_keeps_to_the_clock():
    now = [0.0]
    reads: list[int] = []
    changes: list[list[Route]] = []
    weights = iter([5, 5, 25, 25, 25])

    def read() -> list[Route]:
        reads.append(1)
        return [_route(next(weights))]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    served = DevTraffic(IstioSource()).run(
        read,
        stop=lambda: len(reads) >= 5,
        on_routes=changes.append,
        clock=lambda: now[0],
        sleep=sleep,
    )
    assert served == 5 and now[0] == 5.0
    assert [r[0].weight for r in changes] == [5, 25]  # told of each change once


@pytest.fixture
def payments(db) -> Team:
    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", "payments")
    return team


@pytest.mark.django_db
def test_routes_follow_each_services_latest_rollout(payments, settings):
    settings.KILN_PROMETHEUS_URL = "http://127.0.0.1:9"
    settings.KILN_PROMETHEUS_SCRAPE_SECONDS = 5.0
    service = services.service_create(
        actor=ADMIN,
        team=payments,
        name="search",
        namespace="shop",
        metrics_source=MetricsSource.PROMETHEUS,
        sim_traffic_class="bursty",
    )
    services.service_create(actor=ADMIN, team=payments, name="simulated", namespace="shop")
    # No rollout yet: v1 takes everything. Simulated services are not served.
    (route,) = dev_routes()
    assert (route.service, route.baseline, route.canary, route.weight) == ("search", "v1", "v1", 0)
    services.service_set_simulated_regression(
        actor=ADMIN, service=service, version="v3", regression="errors"
    )
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v2", canary_version="v3", tick_seconds=60
    )
    Rollout.objects.filter(pk=rollout.pk).update(weight=25)
    (route,) = dev_routes()
    assert (route.baseline, route.canary, route.weight) == ("v2", "v3", 25)
    assert (route.traffic_class, route.regression, route.seed) == ("bursty", "errors", rollout.seed)


@pytest.mark.django_db
def test_the_prometheus_demo_service_is_seeded_once(settings):
    settings.KILN_PROMETHEUS_URL = "http://127.0.0.1:9090"
    team_slug, name, namespace, traffic = PROMETHEUS_DEMO
    Team.objects.create(slug=team_slug, name="Payments")
    created = seed_prometheus_demo()
    assert f"canary service {namespace}/{name} read from Prometheus" in created
    service = Service.objects.get(namespace=namespace, name=name)
    assert service.metrics_source == MetricsSource.PROMETHEUS
    assert (service.prometheus_url, service.sim_traffic_class) == ("", traffic)
    assert seed_prometheus_demo() == []


# A transaction of its own: the command reopens stale connections each second, as a process does.
@pytest.mark.django_db(transaction=True)
def test_the_command_serves_until_its_seconds_are_up_and_says_how_traffic_is_split(
    payments, settings
):
    settings.KILN_PROMETHEUS_URL = "http://127.0.0.1:9"
    services.service_create(
        actor=ADMIN,
        team=payments,
        name="search",
        namespace="shop",
        metrics_source=MetricsSource.PROMETHEUS,
    )
    out = io.StringIO()
    before = signal.getsignal(signal.SIGTERM)
    call_command("canary_dev_traffic", port=free_port(), seconds=2, stdout=out)
    assert "shop/search: v1 100% (steady)" in out.getvalue()
    # Run in this process, it leaves SIGTERM as it found it: the worker stays stoppable.
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize(
    "options, message",
    [({"port": 0}, "--port must be a TCP port"), ({"native_schema": 9}, "between -4 and 8")],
    ids=["port", "schema"],
)
def test_the_command_refuses_bad_options(options, message):
    with pytest.raises(CommandError, match=message):
        call_command("canary_dev_traffic", seconds=1, **options)
