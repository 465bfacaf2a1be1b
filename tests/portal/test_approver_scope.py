"""Approvers act for their own teams: an approver of one team neither sees, approves nor rejects
another team's requests (API, page, admin, service); production's two approvals come from two
approvers who act for that team; KILN_APPROVERS_GLOBAL is the explicit central change board;
the queue says on whose behalf each approval counts."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from audit.models import OutboxEvent
from kiln.errors import IllegalTransition
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import APPROVER, AUDITOR, Actor
from portal.lifecycle import Status
from portal.models import ApprovalDecision, Environment
from portal.services import environment_approve, environment_reject, environment_request_submit
from portal.services.approvals import NotApproverOfTeam
from tests.portal.conftest import make_person, request_data

pytestmark = pytest.mark.django_db
URL = "/api/v1/environments/"
PROD = {"env_class": "prod", "ttl_hours": 1000, "justification": "launch of the new checkout"}


@pytest.fixture
def scoped(people, teams) -> dict[str, Actor]:
    """people, plus approvers of search (sam) and of payments (pat), and an auditor (aud)."""
    return {
        **people,
        "sam": make_person("sam", {APPROVER}, teams["search"]),
        "pat": make_person("pat", {APPROVER}, teams["payments"]),
        "aud": make_person("aud", {AUDITOR}, None),
    }


def _pending(people, **overrides) -> Environment:
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(**{"env_class": "staging", **overrides})
    )
    assert env.status == Status.PENDING_APPROVAL
    return env


def _unchanged(env: Environment) -> None:
    env.refresh_from_db()
    assert env.status == Status.PENDING_APPROVAL
    assert not ApprovalDecision.objects.filter(environment=env).exists()
    assert not OutboxEvent.objects.filter(action="portal.approval.recorded").exists()


def _session(username: str, role: str, team: str | None = None, staff: bool = False) -> Client:
    user = get_user_model().objects.get_or_create(username=username)[0]
    if staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    if team and not Membership.objects.filter(user=user, team__slug=team).exists():
        Membership.objects.create(user=user, team=Team.objects.get(slug=team))
    client = Client()
    client.force_login(user)
    return client


# --- the service refuses, whoever calls it ------------------------------------------------


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_an_approver_of_another_team_cannot_decide_and_changes_nothing(scoped, verb):
    env = _pending(scoped)
    decide = environment_approve if verb == "approve" else environment_reject
    with pytest.raises(NotApproverOfTeam) as refused:
        decide(actor=scoped["sam"], environment=env, reason="not mine")
    assert refused.value.http_status == 403 and refused.value.extra == {"team": "payments"}
    assert "payments" in refused.value.message
    _unchanged(env)


def test_prod_needs_two_approvers_who_act_for_its_team(scoped, django_capture_on_commit_callbacks):
    env = _pending(scoped, **PROD)
    environment_approve(actor=scoped["carol"], environment=env, reason="looks right")
    with pytest.raises(NotApproverOfTeam):  # an approver of search is not a second approval
        environment_approve(actor=scoped["sam"], environment=env, reason="fine by me")
    env.refresh_from_db()
    assert env.status == Status.PENDING_APPROVAL
    assert list(env.decisions.values_list("approver_name", flat=True)) == ["carol"]
    with django_capture_on_commit_callbacks(execute=True):
        environment_approve(actor=scoped["pat"], environment=env, reason="ok")
    env.refresh_from_db()
    assert env.status == Status.READY
    recorded = OutboxEvent.objects.filter(action="portal.approval.recorded").order_by("id")
    assert [
        (e.actor, e.data["on_behalf_of"], e.data["as"], e.data["approvals"]) for e in recorded
    ] == [
        ("carol", "payments", "member", 1),
        ("pat", "payments", "member", 2),
    ]


def test_a_request_no_longer_waiting_is_refused_in_words_with_its_status_in_extra(scoped):
    env = _pending(scoped)
    environment_reject(actor=scoped["carol"], environment=env, reason="too big")
    with pytest.raises(IllegalTransition) as refused:
        environment_approve(actor=scoped["pat"], environment=env, reason="fine")
    assert refused.value.message == (
        f"cannot approve {env.namespace}: its status is Rejected, and only a request waiting "
        "for approval can be decided"
    )
    assert refused.value.extra == {"from": "REJECTED", "environment": env.public_id}


def test_the_central_change_board_is_an_explicit_grant(scoped, settings):
    settings.KILN_APPROVERS_GLOBAL = True
    env = _pending(scoped, **PROD)
    environment_approve(actor=scoped["carol"], environment=env, reason="payments says yes")
    environment_approve(actor=scoped["sam"], environment=env, reason="the board says yes")
    env.refresh_from_db()
    assert env.status != Status.PENDING_APPROVAL
    board = OutboxEvent.objects.filter(action="portal.approval.recorded", actor="sam").get()
    assert board.data["as"] == "change-board" and board.data["on_behalf_of"] == "payments"


# --- the API: another team's request is not there -------------------------------------------


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_over_the_api_another_teams_request_is_a_404_and_changes_nothing(
    scoped, api_client_for, verb
):
    env = _pending(scoped)
    sam = api_client_for("approver", sub="sam", team="search")
    answer = sam.post(f"{URL}{env.public_id}/{verb}/", {"reason": "not mine"}, format="json")
    assert answer.status_code == 404
    assert sam.get(f"{URL}{env.public_id}/").status_code == 404
    assert sam.get(URL).json()["count"] == 0
    _unchanged(env)


def test_auditors_and_platform_admins_still_see_every_team(scoped, api_client_for):
    env = _pending(scoped)
    for roles in (("auditor",), ("platform-admin",)):
        client = api_client_for(*roles, sub=f"{roles[0]}-x")
        assert client.get(f"{URL}{env.public_id}/").status_code == 200
        assert client.get(URL).json()["count"] == 1


def test_the_api_says_on_whose_behalf_each_approval_counts(scoped, api_client_for):
    env = _pending(scoped, **PROD)
    carol = api_client_for("approver", sub="carol", team="payments")
    body = carol.post(f"{URL}{env.public_id}/approve/", {"reason": "yes"}, format="json").json()
    assert body["approvals"] == [
        {
            "approver": "carol",
            "decision": "approve",
            "reason": "yes",
            "at": body["approvals"][0]["at"],
            "on_behalf_of": "payments",
            "place": 1,
            "needed": 2,
        }
    ]


# --- the queue page, the detail page and the admin --------------------------------------------


def test_the_queue_lists_only_requests_the_approver_may_decide(scoped):
    env = _pending(scoped, **PROD)
    environment_approve(actor=scoped["carol"], environment=env, reason="looks right")
    search = _session("sam", "approver", "search").get(reverse("portal:approval-queue"))
    assert search.status_code == 200
    assert env.namespace.encode() not in search.content
    assert b"Nothing is waiting for approval." in search.content
    payments = _session("pat", "approver", "payments").get(reverse("portal:approval-queue"))
    page = payments.content.decode()
    assert env.namespace in page
    assert "counts for payments as carol&#x27;s approval, 1 of 2" in page
    assert (
        "Yours would be approval 2 of 2 for payments, as one of the team&#x27;s approvers." in page
    )


def test_the_queue_of_the_change_board_says_so(scoped, settings):
    settings.KILN_APPROVERS_GLOBAL = True
    env = _pending(scoped, **PROD)
    page = _session("sam", "approver", "search").get(reverse("portal:approval-queue"))
    text = page.content.decode()
    assert env.namespace in text
    assert "Yours would be approval 1 of 2 for payments, for the central change board" in text


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_the_decide_page_refuses_another_teams_approver(scoped, verb):
    env = _pending(scoped)
    sam = _session("sam", "approver", "search")
    detail = sam.get(reverse("portal:environment-detail", args=[env.public_id]))
    assert detail.status_code == 404
    answer = sam.post(
        reverse("portal:environment-decide", args=[env.public_id]),
        {"decision": verb, "reason": "not mine"},
    )
    assert answer.status_code == 404
    _unchanged(env)


def test_the_admin_neither_lists_nor_approves_another_teams_request(scoped):
    env = _pending(scoped)
    sam = _session("sam", "approver", "search", staff=True)
    listing = sam.get("/admin/portal/environment/")
    assert listing.status_code == 200 and env.namespace.encode() not in listing.content
    sam.post(
        "/admin/portal/environment/",
        {"action": "approve_selected", "_selected_action": [env.pk]},
        follow=True,
    )
    _unchanged(env)
