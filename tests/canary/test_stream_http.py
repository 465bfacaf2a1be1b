"""The rollout websocket over real HTTP: uvicorn and the Redis channel layer, many dashboards
opening and closing while a few stay and updates are broadcast, then a quiet spell. No dashboard
that stays is closed early and each gets every update. The load test saw dashboards dropped:
a consumer's 5 s wait for a message raced redis-py's 5 s read timeout (kiln/settings/core.py)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import websocket

from canary import services
from canary.services.stream import broadcast
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.audit.conftest import subprocess_env
from tests.canary.test_ownership_support import own_namespace
from tests.kiln.standalone_process import free_port
from tests.support.shape import Shape

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
STAYING = 4
CHURNING = 6
UPDATES = 20
IDLE_SECONDS = 11


def _open(url: str, origin: str) -> websocket.WebSocket:
    socket = websocket.create_connection(url, timeout=30, origin=origin)
    snapshot = json.loads(socket.recv())
    assert snapshot["type"] == "snapshot"
    return socket


class _Dashboard(threading.Thread):
    """A dashboard that stays: reads every message as it comes until it has them all."""

    def __init__(self, socket: websocket.WebSocket) -> None:
        super().__init__(daemon=True)
        self.socket = socket
        self.updates = 0
        self.error = ""

    def run(self) -> None:
        self.socket.settimeout(None)  # the quiet spell and a loaded machine: the join bounds it
        try:
            while self.updates < UPDATES + 2:
                message = json.loads(self.socket.recv())
                if message.get("type") != "update":
                    self.error = f"not an update: {message}"
                    return
                self.updates += 1
        except (OSError, ValueError, websocket.WebSocketException) as exc:
            self.error = f"{type(exc).__name__} {exc}"


def test_dashboards_that_stay_are_not_closed_and_see_every_update(settings, make_token, tmp_path):
    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", team.slug)
    service = services.service_create(actor=ADMIN, team=team, name="checkout", namespace="shop")
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )
    token = make_token(sub="root", roles=["platform-admin"])
    jwt = ("KILN_JWT_JWKS", "KILN_JWT_ISSUER", "KILN_JWT_AUDIENCE")
    environment = subprocess_env(settings, **{name: getattr(settings, name) for name in jwt})
    shape = Shape(port=free_port(), environment=environment, workdir=tmp_path, names=("web",))
    failures: list[str] = []
    try:
        shape.start_all(timeout=90)
        url = shape.base_url.replace("http", "ws", 1) + f"/ws/rollouts/{rollout.pk}/?token={token}"
        # Each dashboard that stays reads as a browser does, all along: it answers the server's
        # keep-alive pings as they come (uvicorn closes a socket that leaves one unanswered
        # for 20 s, which a test reading each socket only at its end invited under load).
        staying = [_Dashboard(_open(url, shape.base_url)) for _ in range(STAYING)]
        for dashboard in staying:
            dashboard.start()
        stop = threading.Event()

        def churn() -> None:
            # Dashboards that open, read their snapshot and go, again and again.
            while not stop.is_set():
                try:
                    _open(url, shape.base_url).close()
                except (OSError, websocket.WebSocketException, AssertionError) as exc:
                    failures.append(f"churn: {type(exc).__name__} {exc}")

        churners = [threading.Thread(target=churn, daemon=True) for _ in range(CHURNING)]
        for thread in churners:
            thread.start()
        for _ in range(UPDATES):
            broadcast(rollout.pk)
            time.sleep(0.25)
        stop.set()
        for thread in churners:
            thread.join(timeout=30)
        # Idle longer than two of the layer's 5 s waits for a message, then two updates more.
        time.sleep(IDLE_SECONDS)
        for _ in range(2):
            broadcast(rollout.pk)
        for i, dashboard in enumerate(staying):
            dashboard.join(timeout=15)  # a loaded machine is slow, not a dropped socket
            if dashboard.is_alive() or dashboard.error:
                failures.append(
                    f"dashboard {i} after {dashboard.updates} updates: "
                    f"{dashboard.error or 'no update for 15 s'}"
                )
            dashboard.socket.close()
    finally:
        shape.stop_all()
        log = (tmp_path / "web.log").read_text(errors="replace")
    assert not failures, (failures[:10], log[-4000:])
    assert "Exception in ASGI application" not in log, log[-4000:]
