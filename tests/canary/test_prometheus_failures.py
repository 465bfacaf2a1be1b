"""A Prometheus that fails is a tick without evidence, audited with the reason: never a decision.

Against the real server (stopped, frozen past the query timeout, restarted) and, for the
answers a real Prometheus never gives (a redirect, an HTML page), a stand-in on loopback.
"""

from __future__ import annotations

import signal
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from audit.models import OutboxEvent
from bench import waiting
from bench.canary.istio_source import History, IstioSource
from canary import services
from canary.models import MetricsSource, RolloutDecision, RolloutStatus
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace
from tests.support.serving import serve_in_thread

pytestmark = pytest.mark.django_db

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
TICK = 60.0


@pytest.fixture
def teams() -> dict[str, Team]:
    teams = {"payments": Team.objects.create(slug="payments", name="Payments")}
    own_namespace("shop", "payments")
    return teams


@pytest.fixture
def backfilled(prometheus_factory):
    """A server with 15 minutes of steady traffic (v1 and v2) backfilled 2 hours ago."""
    source = IstioSource()
    history = History()
    start = int(time.time()) - 2 * 3600
    start -= start % 60
    for i in range(61):
        source.observe("search", "shop", "v1", [60.0] * 40, errors=1)
        source.observe("search", "shop", "v2", [60.0] * 10)
        history.record(source, start + 15 * i)
    server = prometheus_factory(scrape_interval=15, start=False)
    server.backfill(history.openmetrics())
    server.start()
    return server, start


def _rollout(teams, settings, url: str, started_at: float):
    settings.KILN_PROMETHEUS_URL = url
    settings.KILN_PROMETHEUS_SCRAPE_SECONDS = 15
    settings.KILN_PROMETHEUS_SETTLE_SECONDS = 15
    service = services.service_create(
        actor=ADMIN,
        team=teams["payments"],
        name="search",
        namespace="shop",
        metrics_source=MetricsSource.PROMETHEUS,
    )
    rollout = services.rollout_create(
        actor=ADMIN,
        service=service,
        baseline_version="v1",
        canary_version="v2",
        tick_seconds=TICK,
        config={"warmup_ticks": 0},  # every tick is evidence, so its reason is the read's
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    RolloutDecision.objects.filter(rollout=rollout, kind="started").update(
        created_at=datetime.fromtimestamp(started_at, tz=UTC)
    )
    return rollout


def _tick(rollout, number: int) -> tuple[str, dict]:
    """Run a tick; its outcome and the audited `canary.tick.decided` data."""
    outcome = services.rollout_tick(rollout_id=rollout.pk, tick=number)
    event = OutboxEvent.objects.filter(action="canary.tick.decided").order_by("-id").first()
    return outcome, event.data


def _assert_no_evidence(rollout, data: dict, reason: str) -> None:
    rollout.refresh_from_db()
    tick = rollout.ticks.get(number=data["tick"])
    assert tick.evidence["missing"] is True and reason in tick.evidence["note"]
    assert reason in data["reason"] and data["action"] == "continue"
    assert rollout.status == RolloutStatus.RUNNING
    assert not rollout.decisions.filter(kind__in=("promoted", "rolled_back")).exists()


def test_the_reader_counts_a_healthy_window(teams, settings, backfilled):
    server, start = backfilled
    rollout = _rollout(teams, settings, server.url, start + 15)
    outcome, data = _tick(rollout, 1)
    tick = rollout.ticks.get(number=1)
    # (start, start + 60]: four scrapes, each 40 baseline requests (1 error) and 10 canary ones:
    # [baseline requests, canary requests, baseline errors, canary errors].
    assert outcome == "continue" and tick.evidence["missing"] is False
    assert tick.evidence["errors"] == [160.0, 40.0, 4.0, 0.0]


def test_a_stopped_server_is_a_tick_without_evidence_and_the_next_reads_again(
    teams, settings, backfilled
):
    server, start = backfilled
    rollout = _rollout(teams, settings, server.url, start + 15)
    server.stop()
    _, data = _tick(rollout, 1)
    _assert_no_evidence(rollout, data, "Prometheus is unreachable")
    server.start()  # restarted on the same storage: tick 2 reads its own window
    _, data = _tick(rollout, 2)
    assert rollout.ticks.get(number=2).evidence["errors"] == [160.0, 40.0, 4.0, 0.0]


def test_a_server_slower_than_the_query_timeout_is_a_tick_without_evidence(
    teams, settings, backfilled
):
    server, start = backfilled
    rollout = _rollout(teams, settings, server.url, start + 15)
    settings.KILN_PROMETHEUS_TIMEOUT_SECONDS = 0.5
    server.pause()
    try:
        began = time.monotonic()
        _, data = _tick(rollout, 1)
        assert time.monotonic() - began < 5
    finally:
        server.resume()
    _assert_no_evidence(rollout, data, "timed out")


def test_pause_waits_until_every_thread_has_stopped(monkeypatch):
    """SIGSTOP is delivered asynchronously, and the frozen-server tests read at once after
    `pause`: it returns only once every thread reads as stopped, and fails past its timeout."""
    seen = iter([["S", "T"], ["R", "T", "T"], ["T", "t", "T"]])
    asked: list[int] = []

    def states(pid: int) -> list[str]:
        asked.append(pid)
        return next(seen)

    monkeypatch.setattr(waiting, "thread_states", states)
    waiting.wait_stopped(4242)
    assert asked == [4242] * 3
    # A server that never stops is resumed (not left frozen) and named.
    monkeypatch.setattr(waiting, "thread_states", lambda pid: ["S"])
    resumed: list[tuple[int, int]] = []
    kill = SimpleNamespace(kill=lambda pid, sig: resumed.append((pid, sig)))
    monkeypatch.setattr(waiting, "os", kill)  # this module's os only
    with pytest.raises(RuntimeError, match="did not stop"):
        waiting.wait_stopped(4242, timeout=0.05)
    assert resumed == [(4242, signal.SIGCONT)]


def test_a_paused_server_answers_nothing_from_the_moment_pause_returns(prometheus_factory):
    server = prometheus_factory()
    for _ in range(5):
        try:
            server.pause()
            states = waiting.thread_states(server.process.pid)
            assert states and set(states) <= {"T", "t"}, states
            with pytest.raises(OSError):  # the read times out: nothing answers
                urllib.request.urlopen(f"{server.url}/-/ready", timeout=0.3)  # noqa: S310
        finally:
            server.resume()
        with urllib.request.urlopen(f"{server.url}/-/ready", timeout=10) as answer:  # noqa: S310
            assert answer.status == 200


class _Odd(BaseHTTPRequestHandler):
    """Answers every request with a redirect to a real server, or an HTML page with status 200."""

    mode = "redirect"
    target = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.mode == "redirect":
            self.send_response(302)
            self.send_header("Location", self.target + self.path)
            self.end_headers()
            return
        body = b"<html><body>Sign in to continue</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def odd_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Odd)
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "mode, reason",
    [("redirect", "HTTP 302"), ("html", "text/html, not the API's JSON")],
    ids=["redirect", "html"],
)
def test_a_redirect_or_an_html_page_is_a_tick_without_evidence(
    teams, settings, backfilled, odd_server, mode, reason
):
    server, start = backfilled
    # Even a redirect to the real server is not followed: the configured server answers.
    _Odd.mode, _Odd.target = mode, server.url
    rollout = _rollout(teams, settings, odd_server, start + 15)
    _, data = _tick(rollout, 1)
    _assert_no_evidence(rollout, data, reason)
