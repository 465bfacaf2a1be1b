"""No I/O under a rollout's row lock: metrics are read before it, routes written after it.

A tick reads its metrics holding no lock, records its decision and a route intent under
the lock, and writes the VirtualService after the commit; a crash between the write and
the mark is repaired by the next tick (or the beat's sweep), a rollback writes nothing,
and a tick overtaken while it read is discarded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from audit.models import OutboxEvent
from canary import routes, services
from canary.models import MetricsSource, Rollout, RolloutRoute, RolloutStatus
from canary.services import analysis, routing
from canary.traffic import ISTIO_API, canary_weight_of, virtual_service
from kiln.cluster.backends import get_backend
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace
from tests.support.serving import serve_in_thread

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))


def _team() -> Team:
    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", team.slug)
    return team


def _simulated_rollout() -> Rollout:
    service = services.service_create(
        actor=ADMIN, team=_team(), name="checkout", namespace="shop", sim_traffic_class="steady"
    )
    return services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", seed=2
    )


def _live_weight(rollout: Rollout) -> int | None:
    svc = rollout.service
    live = get_backend().get(ISTIO_API, "VirtualService", svc.namespace, svc.name)
    return None if live is None else canary_weight_of(live)


def _route_actions(rollout: Rollout) -> list[tuple[str, int]]:
    events = OutboxEvent.objects.filter(action="canary.route.applied").order_by("id")
    return [
        (e.data["decision"], e.data["weight"])
        for e in events
        if e.data["rollout"] == str(rollout.pk)
    ]


# --- a slow Prometheus holds no row lock ------------------------------------------------


class _Slow(BaseHTTPRequestHandler):
    """A metrics server that, once armed, holds each request until released (at most 30 s,
    past the client's 20 s timeout)."""

    armed = threading.Event()
    arrived = threading.Event()
    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.armed.is_set():
            self.arrived.set()
            self.release.wait(timeout=30)
        body = b"<html>busy</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_prometheus() -> Iterator[str]:
    for event in (_Slow.armed, _Slow.arrived, _Slow.release):
        event.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    _Slow.release.set()
    server.shutdown()
    server.server_close()


@pytest.mark.django_db(transaction=True)
def test_a_slow_prometheus_does_not_block_an_abort_of_the_same_rollout(settings, slow_prometheus):
    settings.KILN_PROMETHEUS_URL = slow_prometheus
    settings.KILN_PROMETHEUS_SCRAPE_SECONDS = 15
    settings.KILN_PROMETHEUS_SETTLE_SECONDS = 15
    settings.KILN_PROMETHEUS_TIMEOUT_SECONDS = 20
    service = services.service_create(
        actor=ADMIN,
        team=_team(),
        name="search",
        namespace="shop",
        metrics_source=MetricsSource.PROMETHEUS,
    )
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", tick_seconds=60
    )
    assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    # Started two hours ago: tick 1's window has long closed, so the tick reads the server.
    rollout.decisions.filter(kind="started").update(
        created_at=datetime.now(tz=UTC) - timedelta(hours=2)
    )
    _Slow.armed.set()
    outcome: list[str] = []

    def tick() -> None:
        try:
            outcome.append(services.rollout_tick(rollout_id=rollout.pk, tick=1))
        finally:
            connection.close()

    worker = threading.Thread(target=tick)
    worker.start()
    try:
        assert _Slow.arrived.wait(timeout=10), "the tick never read the metrics server"
        began = time.monotonic()
        services.rollout_abort(actor=ADMIN, rollout=rollout, reason="stop")
        took = time.monotonic() - began
        # The abort took the row while the tick was still waiting on the server.
        assert not _Slow.release.is_set() and worker.is_alive()
        # Were the row held across the read, the abort would wait the read's 20 s timeout: the
        # server answers only after the release below.
        assert took < 10, f"the abort waited {took:.1f} s for the tick's metrics read"
    finally:
        _Slow.release.set()
        worker.join(timeout=30)
    rollout.refresh_from_db()
    # The tick's read is discarded: the rollout it read is no longer running.
    assert outcome == ["inactive"]
    assert rollout.status == RolloutStatus.ABORTED and not rollout.ticks.exists()
    assert _live_weight(rollout) == 0


# --- intents: committed, applied, marked ------------------------------------------------


@pytest.mark.django_db
def test_a_crash_between_apply_and_mark_is_repaired_by_the_next_tick(monkeypatch):
    rollout = _simulated_rollout()

    def crash(route, *, actor):
        raise RuntimeError("the worker died after the apply")

    with monkeypatch.context() as patch:
        patch.setattr(routing, "route_applied_mark", crash)
        assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    # Applied, never marked: the intent is still open.
    assert _live_weight(rollout) == 5
    intent = RolloutRoute.objects.get(rollout=rollout)
    assert intent.applied_at is None and _route_actions(rollout) == []
    assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "continue"
    intent.refresh_from_db()
    assert intent.applied_at is not None
    assert _route_actions(rollout) == [("started", 5)]
    assert _live_weight(rollout) == 5


@pytest.mark.django_db
def test_a_route_never_applied_is_applied_before_the_next_tick_reads_the_traffic(monkeypatch):
    rollout = _simulated_rollout()

    def down(backend, manifests):
        raise ConnectionError("the cluster is unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(routing, "rollout_routes_write", down)
        assert services.rollout_tick(rollout_id=rollout.pk, tick=0) == "started"
    assert _live_weight(rollout) is None
    assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "continue"
    # The simulated traffic of tick 1 was served at the weight the start ordered.
    assert rollout.ticks.get(number=1).weight == 5
    assert _live_weight(rollout) == 5
    assert _route_actions(rollout) == [("started", 5)]


@pytest.mark.django_db
def test_the_beat_sweep_applies_what_an_abort_left_unapplied(monkeypatch):
    rollout = _simulated_rollout()
    services.rollout_tick(rollout_id=rollout.pk, tick=0)

    def down(backend, manifests):
        raise ConnectionError("the cluster is unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(routing, "rollout_routes_write", down)
        services.rollout_abort(actor=ADMIN, rollout=rollout, reason="stop")
    rollout.refresh_from_db()
    # The abort is decided and committed; its traffic waits for the cluster.
    assert rollout.status == RolloutStatus.ABORTED and _live_weight(rollout) == 5
    services.rollouts_tick_due()
    assert _live_weight(rollout) == 0
    assert _route_actions(rollout) == [("started", 5), ("aborted", 0)]
    assert not RolloutRoute.objects.filter(applied_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_decision_rolled_back_writes_nothing_to_the_cluster(monkeypatch):
    rollout = _simulated_rollout()

    def audit_down(*args, **kwargs):
        raise RuntimeError("the audit outbox is unavailable")

    monkeypatch.setattr("canary.services.machine.record", audit_down)
    with pytest.raises(RuntimeError):
        services.rollout_tick(rollout_id=rollout.pk, tick=0)
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.PENDING
    assert _live_weight(rollout) is None and not RolloutRoute.objects.exists()


@pytest.mark.django_db
def test_a_tick_overtaken_while_it_read_is_discarded(monkeypatch):
    rollout = _simulated_rollout()
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    read = analysis.read_windows
    duplicates: list[str] = []
    outcomes: list[str] = []

    def read_while_a_duplicate_runs(r, tick):
        if not duplicates:
            # The same tick, delivered twice, runs to its end while the first one reads.
            duplicates.append("running")
            outcomes.append(services.rollout_tick(rollout_id=r.pk, tick=tick))
        return read(r, tick)

    monkeypatch.setattr(analysis, "read_windows", read_while_a_duplicate_runs)
    assert services.rollout_tick(rollout_id=rollout.pk, tick=1) == "duplicate"
    assert outcomes == ["continue"]
    assert list(rollout.ticks.values_list("number", flat=True)) == [1]


@pytest.mark.django_db
def test_a_late_write_of_an_older_intent_never_replaces_a_newer_one():
    backend = get_backend()

    def written_for(intent: int, weight: int) -> dict:
        return virtual_service(
            name="checkout", namespace="shop", host="checkout", canary_weight=weight, intent=intent
        )

    routes.rollout_routes_write(backend, [written_for(2, 25)])
    assert routes.rollout_routes_write(backend, [written_for(1, 5)]) == []
    live = backend.get(ISTIO_API, "VirtualService", "shop", "checkout")
    assert canary_weight_of(live) == 25 and routes.intent_of(live) == 2
    routes.rollout_routes_write(backend, [written_for(3, 50)])
    live = backend.get(ISTIO_API, "VirtualService", "shop", "checkout")
    assert canary_weight_of(live) == 50
