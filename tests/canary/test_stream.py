"""The rollout websocket: authentication, the snapshot on connect and live updates per tick."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from channels.db import database_sync_to_async

from canary import services
from kiln.asgi import application
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
HEADERS = [(b"origin", b"http://testserver"), (b"host", b"testserver")]


@pytest.fixture
def rollout():
    team = Team.objects.create(slug="payments", name="Payments")
    Team.objects.create(slug="search", name="Search")
    own_namespace("shop", team.slug)
    service = services.service_create(actor=ADMIN, team=team, name="checkout", namespace="shop")
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", ticks_per_step=2
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    return rollout


class Socket(ApplicationCommunicator):
    """A websocket client speaking the ASGI websocket protocol to Kiln's ASGI application."""

    def __init__(self, path: str) -> None:
        route, _, query = path.partition("?")
        scope = {
            "type": "websocket",
            "path": route,
            "raw_path": route.encode(),
            "query_string": query.encode(),
            "headers": HEADERS,
            "subprotocols": [],
            "client": ("127.0.0.1", 50000),
            "server": ("testserver", 80),
        }
        super().__init__(application, scope)

    async def connect(self) -> tuple[bool, int | None]:
        await self.send_input({"type": "websocket.connect"})
        message = await self.receive_output(5)
        return message["type"] == "websocket.accept", message.get("code")

    async def receive_json_from(self, timeout: float = 5) -> dict:
        message = await self.receive_output(timeout)
        assert message["type"] == "websocket.send", message
        return json.loads(message["text"])

    async def disconnect(self) -> None:
        await self.send_input({"type": "websocket.disconnect", "code": 1000})
        await self.wait(1)


def _communicator(path: str) -> Socket:
    return Socket(path)


def test_stream_sends_a_snapshot_then_every_tick_and_decision(rollout, make_token):
    token = make_token(sub="alice", roles=["engineer"], team="payments")

    async def scenario():
        ws = _communicator(f"/ws/rollouts/{rollout.pk}/?token={token}")
        connected, _ = await ws.connect()
        assert connected
        snapshot = await ws.receive_json_from(timeout=5)
        assert snapshot["type"] == "snapshot"
        assert snapshot["rollout"]["status"] == "running" and snapshot["ticks"] == []
        assert [d["kind"] for d in snapshot["decisions"]] == ["started"]
        for tick in (1, 2):
            await database_sync_to_async(services.rollout_tick)(rollout_id=rollout.pk, tick=tick)
            update = await ws.receive_json_from(timeout=5)
            assert update["type"] == "update" and update["tick"]["tick"] == tick
            assert update["tick"]["llr_upper"] > 0 > update["tick"]["llr_lower"]
        # After tick 2 the canary steps from 5% to 25%: a decision, streamed.
        assert update["rollout"]["weight"] == 25
        assert [d["kind"] for d in update["decisions"]] == ["started", "step_advanced"]
        await ws.disconnect()

    async_to_sync(scenario)()


@pytest.mark.parametrize(
    "who", ["anonymous", "bad-token", "other-team"], ids=["anonymous", "bad-token", "other-team"]
)
def test_stream_refuses_who_may_not_see_the_rollout(rollout, make_token, who):
    query = {
        "anonymous": "",
        "bad-token": "?token=not.a.jwt",
        "other-team": "?token=" + make_token(sub="bob", roles=["engineer"], team="search"),
    }[who]

    async def scenario():
        ws = _communicator(f"/ws/rollouts/{rollout.pk}/{query}")
        connected, code = await ws.connect()
        assert not connected and code == 4403
        await ws.disconnect()

    async_to_sync(scenario)()
