"""The attention list (what needs me, dismissible, audited) and the header's search, across apps,
among what each viewer may see."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import OutboxEvent
from canary import services as canary_services
from canary.chaos.models import ChaosExperiment, ExperimentStatus
from canary.models import Rollout, RolloutStatus
from kiln.attention.models import AttentionDismissal
from kiln.attention.selectors import attention_list
from kiln.attention.services import attention_dismiss
from kiln.errors import InvalidInput, NotFound
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import Actor, system_actor
from kiln.search import audit_links, search
from portal.models import Environment, EnvironmentRequest
from tests.canary.test_ownership_support import own_namespace

pytestmark = pytest.mark.django_db

ADMIN = system_actor("seed")


def person(username: str, role: str, team: Team) -> tuple[Actor, Client]:
    user = get_user_model().objects.create_user(username)
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    Membership.objects.create(user=user, team=team)
    client = Client()
    client.force_login(user)
    return Actor(username=username, roles=frozenset({role}), teams=frozenset({team.slug})), client


def environment(team: Team, name: str, requester: str, status: str, **fields) -> Environment:
    user = get_user_model().objects.get(username=requester)
    request = EnvironmentRequest.objects.create(
        team=team, name=name, env_class="dev", ttl_hours=24, workload_class="standard",
        cpu=1, memory_gib=1, gpu=0, requested_by=user,
    )  # fmt: skip
    return Environment.objects.create(
        request=request, team=team, name=name, env_class="dev", namespace=f"{team.slug}-{name}",
        status=status, **fields,
    )  # fmt: skip


@pytest.fixture
def world():
    payments = Team.objects.create(slug="payments", name="Payments")
    search_team = Team.objects.create(slug="search", name="Search")
    alice, alice_client = person("alice", "engineer", payments)
    dave, dave_client = person("dave", "approver", payments)
    erin, _ = person("erin", "engineer", search_team)
    soon = timezone.now() + timedelta(minutes=30)
    up = timezone.now() - timedelta(hours=23, minutes=30)  # a 24 h TTL's last half hour
    environment(payments, "web", "alice", "READY", expires_at=soon, ready_at=up)
    environment(payments, "idle", "alice", "READY",
                expires_at=timezone.now() + timedelta(days=5), idle_proposed_at=timezone.now())  # fmt: skip
    environment(payments, "asks", "alice", "PENDING_APPROVAL")
    environment(search_team, "hidden-env", "erin", "READY", expires_at=soon, ready_at=up)
    own_namespace("shop", "payments")
    service = canary_services.service_create(
        actor=ADMIN, team=payments, name="checkout", namespace="shop"
    )
    rollout = canary_services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )
    Rollout.objects.filter(pk=rollout.pk).update(status=RolloutStatus.INCONCLUSIVE)
    ChaosExperiment.objects.create(
        name="kill-checkout", team=payments, namespace="shop", fault="pod-kill",
        duration_seconds=60, max_duration_seconds=120, max_pods=1, status=ExperimentStatus.RUNNING,
        lease_duration=15, renew_deadline=10, retry_period=2, max_clock_skew=1, revert_budget=5,
    )  # fmt: skip
    return {"alice": alice, "dave": dave, "erin": erin, "alice_client": alice_client,
            "dave_client": dave_client, "rollout": rollout}  # fmt: skip


def kinds(items) -> list[tuple[str, str]]:
    return sorted((i.kind, i.title) for i in items)


def test_an_engineer_sees_their_expiring_and_idle_environments_held_rollouts_and_experiments(world):
    items = attention_list(viewer=world["alice"])
    found = kinds(items)
    assert ("idle", "idle looks idle") in found
    assert any(k == "expiring" and t.startswith("web expires in 0 h") for k, t in found)
    assert any(k == "inconclusive" and "checkout v2" in t for k, t in found)
    assert any(k == "experiment" and "kill-checkout" in t for k, t in found)
    assert not any(k == "approval" for k, _ in found)  # engineers approve nothing
    assert not any("hidden-env" in t for _, t in found)
    assert all(i.url.startswith("/") for i in items)


def test_an_approver_sees_the_requests_waiting_for_them_and_another_team_sees_none_of_it(world):
    approvals = [i for i in attention_list(viewer=world["dave"]) if i.kind == "approval"]
    assert [i.title for i in approvals] == ["Approve or reject payments/asks"]
    assert (
        approvals[0].detail
        == "dev requested by alice; needs 1 approval from the approvers of Payments"
    )
    erin_sees = kinds(attention_list(viewer=world["erin"]))
    assert erin_sees and all("hidden-env" in t for _, t in erin_sees)


def test_dismissing_hides_the_item_for_that_person_only_and_is_audited(world):
    item = next(i for i in attention_list(viewer=world["alice"]) if i.kind == "idle")
    attention_dismiss(actor=world["alice"], key=item.key)
    attention_dismiss(actor=world["alice"], key=item.key)  # twice: one dismissal, one event
    assert item.key not in [i.key for i in attention_list(viewer=world["alice"])]
    assert AttentionDismissal.objects.filter(username="alice", key=item.key).count() == 1
    events = OutboxEvent.objects.filter(action="kiln.attention.dismissed")
    assert [e.target for e in events] == [f"attention:{item.key}"]
    held = next(i for i in attention_list(viewer=world["dave"]) if i.kind == "inconclusive")
    assert held.key in [i.key for i in attention_list(viewer=world["dave"])]


def test_dismissing_what_does_not_wait_for_you_is_refused_and_changes_nothing(world):
    erin_item = attention_list(viewer=world["erin"])[0]
    with pytest.raises(NotFound):
        attention_dismiss(actor=world["alice"], key=erin_item.key)
    with pytest.raises(InvalidInput):
        attention_dismiss(actor=world["alice"], key="")
    assert not AttentionDismissal.objects.exists()
    assert not OutboxEvent.objects.filter(action="kiln.attention.dismissed").exists()
    response = world["alice_client"].post(
        reverse("attention-dismiss"), {"key": erin_item.key}, HTTP_HX_REQUEST="true"
    )
    assert (
        response.status_code == 404 and b"Nothing with that key waits for you" in response.content
    )


def test_the_home_page_lists_items_with_dismiss_and_the_feed_sends_them(world):
    home = world["alice_client"].get(reverse("home"))
    assert b"Needs your attention" in home.content and b"idle looks idle" in home.content
    assert home.content.count(b'name="key"') == len(attention_list(viewer=world["alice"]))
    feed = world["alice_client"].get(reverse("attention-feed")).json()
    assert {i["kind"] for i in feed["items"]} == {"expiring", "idle", "inconclusive", "experiment"}


def test_the_home_pages_spend_says_whose_it_is(world):
    home = world["alice_client"].get(reverse("home")).content
    assert b"estimated for your teams, since the 1st" in home
    # Beside the budget's figure (what ran), the home page's says it is the other one.
    assert b"hourly price for the hours it was up" in home and b"what ran" in home
    root = get_user_model().objects.create_user("root", is_superuser=True, is_staff=True)
    client = Client()
    client.force_login(root)
    home = client.get(reverse("home")).content
    assert b"for every team, since the 1st" in home and b"for your teams" not in home


def test_search_finds_each_kind_by_name_or_id_among_what_the_viewer_may_see(world):
    alice = world["alice"]
    assert [h.title for h in search(alice, "web")] == ["payments/web"]
    env = Environment.objects.get(name="asks")
    assert [h.title for h in search(alice, env.public_id)] == ["payments/asks"]
    assert [h.kind for h in search(alice, "checkout")] == ["rollout", "experiment"]
    assert [h.kind for h in search(alice, str(world["rollout"].pk))] == ["rollout"]
    assert search(alice, "hidden-env") == []
    assert [h.title for h in search(world["erin"], "hidden")] == ["search/hidden-env"]
    assert search(world["erin"], "checkout") == []


def test_search_links_auditors_into_the_audit_chain_only(world):
    auditor = Actor(username="ann", roles=frozenset({"auditor"}))
    assert [h.title for h in audit_links(auditor, "42")] == ["Audit event #42", "Events on 42"]
    assert [h.title for h in audit_links(auditor, "canary.rollout.promoted")] == [
        "Events on canary.rollout.promoted",
        "Events canary.rollout.promoted",
    ]
    assert audit_links(world["alice"], "42") == []
    # Links to a filter are not results: the search itself finds nothing by that number.
    assert search(auditor, "42") == []


def test_the_search_page_counts_results_and_lists_audit_links_apart(world):
    auditor = get_user_model().objects.create_user("ann")
    auditor.groups.add(Group.objects.get_or_create(name="auditor")[0])
    client = Client()
    client.force_login(auditor)
    page = client.get(reverse("search"), {"q": "hidden"}).content.decode()
    assert "1 result for <strong>hidden</strong>" in page
    assert "In the audit chain" in page and "Events on hidden" in page
    page = client.get(reverse("search"), {"q": "nothing-by-this-name"}).content.decode()
    assert "0 results" in page and 'id="search-none"' in page and "Events on" in page
    page = world["alice_client"].get(reverse("search"), {"q": "web"}).content.decode()
    assert "1 result for" in page and "In the audit chain" not in page


def test_a_query_too_short_or_too_long_is_a_400_with_the_reason(world):
    with pytest.raises(InvalidInput):
        search(world["alice"], " w ")
    page = world["alice_client"].get(reverse("search"), {"q": "x" * 101})
    assert page.status_code == 400 and b"Type 2 to 100 characters" in page.content
    ok = world["alice_client"].get(reverse("search"), {"q": "web"})
    assert ok.status_code == 200 and b"payments/web" in ok.content
