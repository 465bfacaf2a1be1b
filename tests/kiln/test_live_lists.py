"""Live lists over a websocket (kiln/live_lists.py): each render shows only what the listener
may see now, a change on the page arrives without asking, and a caller without a role is
refused like any stream."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from canary import services
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from kiln.identity.services import membership_add, membership_remove
from kiln.live_lists import RECHECK_SECONDS
from kiln.websocket import CLOSE_ACCESS_LOST
from tests.canary.test_ownership_support import own_namespace
from tests.canary.test_stream_access import Socket

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
WITHIN = 5.0


@pytest.fixture
def rollouts(settings):
    """A rollout of payments' checkout and one of search's indexer."""
    settings.KILN_WS_RECHECK_SECONDS = 0.2
    made = {}
    for slug, name, namespace in (("payments", "checkout", "shop"), ("search", "indexer", "idx")):
        team = Team.objects.create(slug=slug, name=slug.title())
        own_namespace(namespace, slug)
        service = services.service_create(actor=ADMIN, team=team, name=name, namespace=namespace)
        made[slug] = services.rollout_create(
            actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
        )
    return made


async def _rows(ws: Socket, seconds: float = WITHIN) -> str:
    message = await ws.receive_output(seconds)
    assert message["type"] == "websocket.send", message
    payload = json.loads(message["text"])
    assert payload["type"] == "rows"
    return payload["html"]


async def _open(ws: Socket) -> str:
    await ws.send_input({"type": "websocket.connect"})
    assert (await ws.receive_output(5))["type"] == "websocket.accept"
    return await _rows(ws)


def test_the_rollout_list_shows_what_the_listener_may_see_and_follows_a_lost_membership(
    rollouts, make_token
):
    token = make_token(sub="alice", roles=["engineer"])  # her teams are her memberships
    get_user_model().objects.create_user("alice")
    membership = membership_add(
        actor=ADMIN, team=Team.objects.get(slug="payments"), username="alice"
    )

    async def scenario():
        ws = Socket(f"/ws/lists/rollouts/?token={token}", origin="http://testserver")
        html = await _open(ws)
        assert "shop/checkout" in html and "idx/indexer" not in html
        await database_sync_to_async(membership_remove)(actor=ADMIN, membership=membership)
        # The next re-check keeps her (she still has a role) but the rows are hers no more.
        html = await _rows(ws)
        assert "shop/checkout" not in html and "No rollouts yet" in html
        await ws.send_input({"type": "websocket.disconnect", "code": 1000})

    async_to_sync(scenario)()


def test_a_rollouts_change_reaches_the_list_at_once(rollouts, make_token, settings):
    token = make_token(sub="alice", roles=["engineer"], team="payments")
    payments = rollouts["payments"]

    async def scenario():
        ws = Socket(f"/ws/lists/rollouts/?token={token}&status=", origin="http://testserver")
        html = await _open(ws)
        assert 'data-status="pending"' in html
        await database_sync_to_async(services.rollout_abort)(
            actor=ADMIN, rollout=payments, reason="not today"
        )
        # The rollout's broadcast renders the rows again: sooner than the list's re-check.
        html = await _rows(ws, RECHECK_SECONDS - 0.5)
        assert 'data-status="aborted"' in html and "not today" in html
        await ws.send_input({"type": "websocket.disconnect", "code": 1000})

    async_to_sync(scenario)()


@pytest.mark.parametrize("kind", ["environments", "rollouts", "experiments"])
def test_a_caller_without_a_kiln_role_is_refused(rollouts, make_token, kind):
    token = make_token(sub="nobody", roles=[])

    async def scenario():
        ws = Socket(f"/ws/lists/{kind}/?token={token}", origin="http://testserver")
        await ws.send_input({"type": "websocket.connect"})
        message = await ws.receive_output(5)
        assert message["type"] == "websocket.close" and message["code"] == CLOSE_ACCESS_LOST

    async_to_sync(scenario)()


@pytest.mark.parametrize("kind", ["environments", "experiments"])
def test_the_other_lists_open_with_their_rows(rollouts, make_token, kind):
    token = make_token(sub="alice", roles=["engineer"], team="payments")

    async def scenario():
        ws = Socket(f"/ws/lists/{kind}/?token={token}", origin="http://testserver")
        html = await _open(ws)
        assert "No environments match" in html or "No experiments yet" in html
        await ws.send_input({"type": "websocket.disconnect", "code": 1000})

    async_to_sync(scenario)()


@pytest.mark.parametrize(
    "frame", [{"text": "not json"}, {"bytes": b"\x00\xff"}, {"text": "x" * 2**20}]
)
def test_whatever_a_client_sends_is_ignored_and_the_stream_goes_on(rollouts, make_token, frame):
    # Once a frame that is not JSON crashed the consumer: it never disconnected, and its
    # re-check and render tasks ran on with nobody listening.
    token = make_token(sub="alice", roles=["engineer"], team="payments")

    async def scenario():
        ws = Socket(f"/ws/lists/rollouts/?token={token}", origin="http://testserver")
        await _open(ws)
        await ws.send_input({"type": "websocket.receive", **frame})
        assert await ws.receive_nothing(0.5)  # no close, no crash (it would raise here)
        await ws.send_input({"type": "websocket.disconnect", "code": 1000})
        await ws.wait(5)  # the consumer ends: nothing left running

    async_to_sync(scenario)()
