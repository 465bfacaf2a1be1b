"""Approvers steer and see rollouts only of the teams they act for: an approver of search cannot
promote, abort, retry or extend payments' canary (API, page, service) nor subscribe to its
stream; KILN_APPROVERS_GLOBAL grants it explicitly."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from audit.models import OutboxEvent
from canary import services
from canary.models import Rollout, RolloutStatus
from kiln.errors import Forbidden
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import APPROVER, AUDITOR, PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace
from tests.canary.test_stream import Socket

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
SAM = Actor("sam", roles=frozenset({APPROVER}), teams=frozenset({"search"}))
# Sees every team (an auditor) but approves for search only: seeing is not steering.
SAM_AUDITING = Actor("sam", roles=frozenset({APPROVER, AUDITOR}), teams=frozenset({"search"}))
PAT = Actor("pat", roles=frozenset({APPROVER}), teams=frozenset({"payments"}))
VERBS = {
    "promote": services.rollout_promote,
    "abort": services.rollout_abort,
    "retry": services.rollout_retry,
    "extend": services.rollout_extend,
}


def _running() -> Rollout:
    """payments' canary at 5% (started, first tick done), search existing beside it."""
    team = Team.objects.create(slug="payments", name="Payments")
    Team.objects.create(slug="search", name="Search")
    own_namespace("shop", team.slug)
    service = services.service_create(actor=ADMIN, team=team, name="checkout", namespace="shop")
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2", ticks_per_step=2
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    rollout = Rollout.objects.select_related("service__team").get(pk=rollout.pk)
    assert rollout.status == RolloutStatus.RUNNING and rollout.weight == 5
    return rollout


@pytest.fixture
def rollout(db) -> Rollout:
    return _running()


def _steering_events(rollout: Rollout) -> int:
    return OutboxEvent.objects.filter(
        target=f"canary.rollout:{rollout.pk}", action__startswith="canary.rollout."
    ).count()


def _unchanged(rollout: Rollout, events: int) -> None:
    fresh = Rollout.objects.get(pk=rollout.pk)
    assert (fresh.status, fresh.weight) == (RolloutStatus.RUNNING, 5)
    assert _steering_events(rollout) == events


def _session(username: str, role: str, team: str) -> Client:
    user = get_user_model().objects.create_user(username)
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    Membership.objects.create(user=user, team=Team.objects.get(slug=team))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("actor", [SAM, SAM_AUDITING], ids=["approver", "approver-and-auditor"])
def test_the_service_refuses_to_promote_another_teams_rollout(rollout, actor):
    events = _steering_events(rollout)
    with pytest.raises(Forbidden):
        services.rollout_promote(actor=actor, rollout=rollout, reason="ship it")
    _unchanged(rollout, events)


@pytest.mark.django_db
def test_an_approver_of_the_team_promotes(rollout):
    services.rollout_promote(actor=PAT, rollout=rollout, reason="ship it")
    fresh = Rollout.objects.get(pk=rollout.pk)
    assert (fresh.status, fresh.weight) == (RolloutStatus.PROMOTED, 100)
    assert OutboxEvent.objects.filter(action="canary.rollout.promoted", actor="pat").count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("verb", sorted(VERBS))
def test_over_the_api_another_teams_rollout_is_a_404_for_every_verb(rollout, api_client_for, verb):
    sam = api_client_for("approver", sub="sam", team="search")
    events = _steering_events(rollout)
    body = {"reason": "steering someone else's canary"}
    answer = sam.post(f"/api/v1/rollouts/{rollout.pk}/{verb}/", body, format="json")
    assert answer.status_code == 404
    assert sam.get(f"/api/v1/rollouts/{rollout.pk}/").status_code == 404
    assert sam.get("/api/v1/rollouts/").json()["count"] == 0
    _unchanged(rollout, events)


@pytest.mark.django_db
@pytest.mark.parametrize("verb", sorted(VERBS))
def test_from_the_page_another_teams_rollout_is_a_404_for_every_verb(rollout, verb):
    sam = _session("sam", "approver", "search")
    events = _steering_events(rollout)
    assert sam.get(reverse("canary:rollout-detail", args=[rollout.pk])).status_code == 404
    answer = sam.post(
        reverse("canary:rollout-action", args=[rollout.pk]),
        {"action": verb, "reason": "steering someone else's canary", "ticks": 3},
    )
    assert answer.status_code == 404
    assert str(rollout.pk) not in sam.get(reverse("canary:rollout-list")).content.decode()
    _unchanged(rollout, events)


@pytest.mark.django_db
def test_the_page_offers_promotion_to_the_teams_approver_only(rollout):
    page = _session("pat", "approver", "payments").get(
        reverse("canary:rollout-detail", args=[rollout.pk])
    )
    assert 'value="promote"' in page.content.decode()


@pytest.mark.django_db
def test_the_central_change_board_promotes_any_team_by_explicit_grant(
    rollout, api_client_for, settings
):
    settings.KILN_APPROVERS_GLOBAL = True
    sam = api_client_for("approver", sub="sam", team="search")
    page = _session("sam-board", "approver", "search").get(
        reverse("canary:rollout-detail", args=[rollout.pk])
    )
    assert 'value="promote"' in page.content.decode()
    answer = sam.post(f"/api/v1/rollouts/{rollout.pk}/promote/", {"reason": "board"}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["status"] == "promoted"


def _connects(rollout: Rollout, token: str) -> tuple[bool, int | None]:
    async def scenario() -> tuple[bool, int | None]:
        ws = Socket(f"/ws/rollouts/{rollout.pk}/?token={token}")
        outcome = await ws.connect()
        await ws.disconnect()
        return outcome

    return async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_the_stream_of_another_teams_rollout_is_refused_to_its_approver(make_token, settings):
    rollout = _running()
    token = make_token(sub="sam", roles=["approver"], team="search")
    assert _connects(rollout, token) == (False, 4403)
    settings.KILN_APPROVERS_GLOBAL = True
    assert _connects(rollout, token)[0] is True
