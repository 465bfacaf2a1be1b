"""The rollout websocket keeps asking who listens: a token's exp, a removed membership, a lost
role, a deactivated user or a signed-out session close it with a code saying why; and its
handshake is accepted only from the socket's own origin (scheme, host and port)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from channels.db import database_sync_to_async
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from canary import services
from kiln.asgi import application
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from kiln.identity.services import membership_add, membership_remove
from kiln.websocket import CLOSE_ACCESS_LOST, CLOSE_CREDENTIALS_ENDED, origin_allowed
from tests.canary.test_ownership_support import own_namespace

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
RECHECK = 0.2  # seconds between re-checks in these tests
WITHIN = 3.0  # a change is noticed within this many seconds


@pytest.fixture
def rollout(settings):
    settings.KILN_WS_RECHECK_SECONDS = RECHECK
    team = Team.objects.create(slug="payments", name="Payments")
    Team.objects.create(slug="search", name="Search")
    own_namespace("shop", team.slug)
    service = services.service_create(actor=ADMIN, team=team, name="checkout", namespace="shop")
    return services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )


class Socket(ApplicationCommunicator):
    """A websocket client of Kiln's ASGI application, with the headers and scheme given."""

    def __init__(
        self, path: str, *, origin: str | None, host: str = "testserver", scheme: str = "ws",
        cookie: str | None = None,
    ) -> None:  # fmt: skip
        route, _, query = path.partition("?")
        headers = [(b"host", host.encode())]
        if origin is not None:
            headers.append((b"origin", origin.encode()))
        if cookie is not None:
            headers.append((b"cookie", cookie.encode()))
        scope = {
            "type": "websocket",
            "scheme": scheme,
            "path": route,
            "raw_path": route.encode(),
            "query_string": query.encode(),
            "headers": headers,
            "subprotocols": [],
            "client": ("127.0.0.1", 50000),
            "server": ("testserver", 80),
        }
        super().__init__(application, scope)

    async def connect(self) -> bool:
        """Open the socket: True if accepted (the snapshot is read too)."""
        await self.send_input({"type": "websocket.connect"})
        message = await self.receive_output(5)
        if message["type"] != "websocket.accept":
            return False
        snapshot = await self.receive_output(5)
        assert json.loads(snapshot["text"])["type"] == "snapshot"
        return True

    async def closed_within(self, seconds: float) -> tuple[int | None, float]:
        """Wait for the server to close the socket: (close code, seconds it took)."""
        started = time.monotonic()
        while True:
            left = seconds - (time.monotonic() - started)
            message = await self.receive_output(max(left, 0.01))
            if message["type"] == "websocket.close":
                return message.get("code"), time.monotonic() - started

    async def still_open_after(self, seconds: float) -> bool:
        """True if nothing closes the socket for `seconds`."""
        return await self.receive_nothing(timeout=seconds, interval=0.05)

    async def disconnect(self) -> None:
        await self.send_input({"type": "websocket.disconnect", "code": 1000})
        await self.wait(1)


def run(scenario: Callable[[], Any]) -> None:
    async_to_sync(scenario)()


# --- credentials and access, re-checked ------------------------------------------------------


def test_a_stream_closes_with_4401_when_its_token_expires(rollout, make_token):
    # exp is whole seconds: a 4 s token leaves the handshake (which creates the user and
    # audits it on first sight) 3 to 4 s, not the 1 to 2 s a loaded machine could overrun.
    token = make_token(sub="alice", roles=["engineer"], team="payments", ttl_seconds=4)
    expires_at = json.loads(_payload(token))["exp"]

    async def scenario():
        ws = Socket(f"/ws/rollouts/{rollout.pk}/?token={token}", origin="http://testserver")
        assert await ws.connect()
        code, _ = await ws.closed_within(7)
        assert code == CLOSE_CREDENTIALS_ENDED
        # Closed at the token's exp, not before and not long after.
        assert expires_at - 0.5 <= time.time() <= expires_at + WITHIN
        await ws.disconnect()

    run(scenario)


def test_a_stream_closes_with_4403_when_the_member_is_removed_from_the_team(rollout, make_token):
    # alice's token names no team: platform admins granted her payments.
    token = make_token(sub="alice", roles=["engineer"])
    get_user_model().objects.create_user("alice")
    payments = Team.objects.get(slug="payments")
    membership = membership_add(actor=ADMIN, team=payments, username="alice")

    async def scenario():
        ws = Socket(f"/ws/rollouts/{rollout.pk}/?token={token}", origin="http://testserver")
        assert await ws.connect()
        assert await ws.still_open_after(3 * RECHECK)  # re-checks that pass keep it open
        await database_sync_to_async(membership_remove)(actor=ADMIN, membership=membership)
        code, took = await ws.closed_within(WITHIN)
        assert code == CLOSE_ACCESS_LOST and took < WITHIN
        await ws.disconnect()

    run(scenario)


def test_a_stream_rides_out_a_short_database_outage_and_closes_with_1011_on_a_long_one(
    rollout, make_token, monkeypatch
):
    """A re-check that cannot reach the database is retried: the stream stays open for the
    grace period (nothing can be revoked in a database that is down), then closes with 1011."""
    from django.db import OperationalError

    from canary.consumers import RolloutConsumer
    from kiln import websocket

    token = make_token(sub="alice", roles=["engineer"], team="payments")
    real = RolloutConsumer.authorise
    down = {"since": None}

    def authorise(self, actor):
        if down["since"] is not None:
            raise OperationalError("the database is restarting")
        return real(self, actor)

    monkeypatch.setattr(RolloutConsumer, "authorise", authorise)
    monkeypatch.setattr(websocket, "RECHECK_FAILURE_GRACE_SECONDS", 1.0)

    async def scenario():
        ws = Socket(f"/ws/rollouts/{rollout.pk}/?token={token}", origin="http://testserver")
        assert await ws.connect()
        down["since"] = time.monotonic()
        assert await ws.still_open_after(0.6)
        code, _ = await ws.closed_within(WITHIN)
        assert code == websocket.CLOSE_RECHECK_FAILED
        assert time.monotonic() - down["since"] >= 1.0
        await ws.disconnect()

    run(scenario)


def _session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    name = django_settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}"


def _session_engineer() -> tuple[Any, str]:
    """A payments engineer signed in with a session: (user, Cookie header)."""
    user = get_user_model().objects.create_user("erin")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    Membership.objects.create(user=user, team=Team.objects.get(slug="payments"))
    return user, _session_cookie(user)


def _lose_role(user: Any) -> None:
    user.groups.clear()


def _deactivate(user: Any) -> None:
    user.is_active = False
    user.save(update_fields=["is_active"])


def _sign_out(user: Any) -> None:
    from django.contrib.sessions.models import Session

    Session.objects.all().delete()


@pytest.mark.parametrize(
    "change, code",
    [
        (_lose_role, CLOSE_ACCESS_LOST),
        (_deactivate, CLOSE_CREDENTIALS_ENDED),
        (_sign_out, CLOSE_CREDENTIALS_ENDED),
    ],
    ids=["role-lost", "deactivated", "signed-out"],
)
def test_a_session_stream_closes_when_the_user_loses_access(rollout, change, code):
    user, cookie = _session_engineer()

    async def scenario():
        ws = Socket(f"/ws/rollouts/{rollout.pk}/", origin="http://testserver", cookie=cookie)
        assert await ws.connect()
        assert await ws.still_open_after(3 * RECHECK)
        await database_sync_to_async(change)(user)
        got, took = await ws.closed_within(WITHIN)
        assert got == code and took < WITHIN
        await ws.disconnect()

    run(scenario)


def _payload(token: str) -> str:
    import base64

    part = token.split(".")[1]
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode()


# --- origin: scheme, host and port -------------------------------------------------------------


def _scope(origin: str | None, host: str, scheme: str) -> dict[str, Any]:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    return {"type": "websocket", "scheme": scheme, "headers": headers}


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize(
    "origin, host, scheme, accepted",
    [
        ("http://testserver:8000", "testserver:8000", "ws", True),
        ("http://testserver", "testserver", "ws", True),
        ("http://TestServer", "testserver", "ws", True),
        ("https://testserver", "testserver", "wss", True),
        ("https://testserver:443", "testserver", "wss", True),
        ("http://testserver:9000", "testserver:8000", "ws", False),
        ("http://testserver:8000", "testserver", "ws", False),
        ("https://testserver:8000", "testserver:8000", "ws", False),
        ("http://testserver", "testserver", "wss", False),
        ("http://evil.example", "testserver", "ws", False),
        ("null", "testserver", "ws", False),
        (None, "testserver", "ws", False),
        ("http://testserver:99999", "testserver:99999", "ws", False),
        ("http://testserver:8000", "evil.example:8000", "ws", False),
    ],
    ids=[
        "same-port",
        "default-port",
        "host-case",
        "tls",
        "tls-explicit-port",
        "other-port",
        "port-on-origin-only",
        "https-page-to-ws",
        "http-page-to-wss",
        "other-host",
        "opaque-origin",
        "no-origin",
        "bad-port",
        "host-not-allowed",
    ],
)
def test_the_origin_must_match_scheme_host_and_port(origin, host, scheme, accepted):
    assert origin_allowed(_scope(origin, host, scheme)) is accepted


@pytest.mark.django_db(transaction=False)
def test_a_trusted_origin_is_matched_on_scheme_host_and_port(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example:8443", "https://*.kiln.example"]
    cases = {
        "https://console.example:8443": True,
        "https://eu.kiln.example": True,
        "https://console.example": False,
        "http://console.example:8443": False,
        "https://kiln.example.evil": False,
        "https://eu.kiln.example:8443": False,
    }
    got = {origin: origin_allowed(_scope(origin, "testserver", "ws")) for origin in cases}
    assert got == cases


def test_a_page_on_another_port_or_scheme_cannot_open_a_stream(rollout, make_token):
    """The handshake through Kiln's ASGI application: the same origin is accepted, another port
    of the same host or another scheme is refused before any snapshot is sent."""
    token = make_token(sub="alice", roles=["engineer"], team="payments")
    path = f"/ws/rollouts/{rollout.pk}/?token={token}"

    async def scenario():
        for origin, accepted in [
            ("http://testserver:8000", True),
            ("http://testserver:8001", False),
            ("https://testserver:8000", False),
        ]:
            ws = Socket(path, origin=origin, host="testserver:8000")
            assert await ws.connect() is accepted, origin
            await ws.disconnect()

    run(scenario)
