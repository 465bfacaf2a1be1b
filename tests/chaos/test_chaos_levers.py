# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""Safety levers: engaging stops every experiment in scope (its controller reverts at once, or
the reaper does), refuses new ones with a 409 naming the lever, holds until released; audited;
who may move which lever; the state on the API, the chaos pages and the home page."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

from audit.models import OutboxEvent
from canary.chaos import actuators
from canary.chaos.models import ChaosExperiment, ChaosInjection, ChaosLease, ChaosLever
from canary.chaos.reaper import chaos_reap
from canary.chaos.services import (
    LeverEngaged,
    experiment_create,
    fault_inject,
    fault_lease_acquire,
    lever_engage,
    lever_release,
)
from kiln.errors import Forbidden, IllegalTransition, InvalidInput, NotFound
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import ENGINEER, Actor
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    admin,
    backend,
    chaos_settings,
    controller_running,
    engineer,
    shop,
)

LEVERS = "/api/v1/chaos/levers/"


def _lab_pods(backend):
    backend.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"api-{i}", "namespace": "lab", "labels": {"app": "api"}},
                "spec": {"containers": [{"name": "api", "image": "api:1"}]},
            }
            for i in range(2)
        ]
    )


def _injected(exp, backend, holder: str):
    term = fault_lease_acquire(experiment_id=exp.pk, holder=holder)
    return fault_inject(experiment_id=exp.pk, holder=holder, term=term, backend=backend)


@pytest.mark.django_db
def test_engaging_the_platform_lever_aborts_every_running_experiment_and_revokes_its_lease(
    engineer, admin, shop, backend
):
    _lab_pods(backend)
    shop_exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    lab_exp = experiment_create(
        actor=admin,
        data=abort_data(namespace="lab", selector={"app": "api"}, service="api"),
        backend=backend,
    )
    _injected(shop_exp, backend, "controller-a")

    lever = lever_engage(actor=admin, reason="incident 7: checkout is down")

    assert lever.engaged and lever.engaged_by == "root"
    for exp in (shop_exp, lab_exp):
        exp.refresh_from_db()
        assert exp.status == "aborted"
        assert exp.end_reason == "the platform lever engaged by root: incident 7: checkout is down"
        assert exp.end_evidence["lever"]["scope"] == "platform"
    assert ChaosLease.objects.get(pk=shop_exp.pk).holder == ""
    actions = list(OutboxEvent.objects.order_by("id").values_list("action", flat=True))
    # Only the injected experiment's lease was held: one revocation.
    assert actions[-4:] == [
        "chaos.lever.engaged",
        "chaos.experiment.aborted",
        "chaos.experiment.aborted",
        "chaos.lease.revoked",
    ]
    revoked = OutboxEvent.objects.get(action="chaos.lease.revoked")
    assert revoked.data == {"holder": "controller-a", "term": 1, "by": "the platform lever"}
    # The holder lost the lease: its renewal fails, and the reaper reverts the fault now.
    live = ChaosInjection.objects.get(experiment=shop_exp)
    assert actuators.in_effect(backend, live.applied)
    assert chaos_reap(backend=backend).reverted == [live.pk]
    assert not actuators.in_effect(backend, live.applied)


@pytest.mark.django_db
def test_an_engaged_lever_refuses_new_experiments_naming_it_until_released(
    engineer, admin, shop, backend
):
    lever_engage(actor=admin, reason="game day over")
    before = OutboxEvent.objects.count()
    with pytest.raises(LeverEngaged) as refused:
        experiment_create(actor=engineer, data=abort_data(), backend=backend)
    assert refused.value.http_status == 409
    assert refused.value.message.startswith("the platform lever is engaged by root: game day over")
    assert ChaosExperiment.objects.count() == 0 and OutboxEvent.objects.count() == before
    lever_release(actor=admin, reason="all clear")
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    assert exp.status == "running"
    assert OutboxEvent.objects.filter(action="chaos.lever.released").get().data["released_by"] == (
        "root"
    )


@pytest.mark.django_db
def test_a_team_lever_stops_and_refuses_only_its_team(engineer, admin, shop, backend):
    _lab_pods(backend)
    shop_exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    lab_exp = experiment_create(
        actor=admin,
        data=abort_data(namespace="lab", selector={"app": "api"}, service="api"),
        backend=backend,
    )
    lever_engage(actor=engineer, team_slug="payments", reason="our release is going out")
    shop_exp.refresh_from_db()
    lab_exp.refresh_from_db()
    assert (shop_exp.status, lab_exp.status) == ("aborted", "running")
    with pytest.raises(LeverEngaged, match="the lever of team payments is engaged by alice"):
        experiment_create(actor=engineer, data=abort_data(name="again"), backend=backend)
    # Another team's namespace is not in the lever's scope.
    experiment_create(
        actor=admin,
        data=abort_data(namespace="lab", name="more", selector={"app": "db"}, service="db"),
        backend=backend,
    )


@pytest.mark.django_db
def test_who_may_move_which_lever_and_a_reason_is_required(engineer, admin, shop):
    outsider = Actor("sam", roles=frozenset({ENGINEER}), teams=frozenset({"search"}))
    with pytest.raises(Forbidden, match="Only platform admins engage the platform lever"):
        lever_engage(actor=engineer, reason="no")
    with pytest.raises(Forbidden, match="engineers of team payments and platform admins"):
        lever_engage(actor=outsider, team_slug="payments", reason="not mine")
    with pytest.raises(InvalidInput) as missing:
        lever_engage(actor=admin, reason="  ")
    assert missing.value.extra == {"fields": {"reason": ["a reason is required"]}}
    with pytest.raises(NotFound):
        lever_engage(actor=admin, team_slug="nope", reason="x")
    lever_engage(actor=engineer, team_slug="payments", reason="incident")
    with pytest.raises(IllegalTransition, match="already engaged by alice"):
        lever_engage(actor=admin, team_slug="payments", reason="again")
    with pytest.raises(Forbidden):
        lever_release(actor=outsider, team_slug="payments", reason="mine now")
    assert ChaosLever.objects.get(team__slug="payments").engaged
    assert not OutboxEvent.objects.filter(action="chaos.lever.released").exists()
    lever_release(actor=admin, team_slug="payments", reason="resolved")
    with pytest.raises(IllegalTransition, match="is not engaged"):
        lever_release(actor=admin, team_slug="payments", reason="twice")


@pytest.mark.django_db(transaction=True)
def test_a_live_controller_reverts_its_fault_as_soon_as_the_lever_is_engaged(
    engineer, admin, shop, backend, chaos_settings
):
    # Renewals 3 s apart: a revert within half of that comes from the notice, not the next
    # renewal (due about 2.9 s after the lever), with room for a loaded machine on both sides.
    chaos_settings.KILN_CHAOS_LEASE_DURATION = 10.0
    chaos_settings.KILN_CHAOS_RENEW_DEADLINE = 5.0
    chaos_settings.KILN_CHAOS_RETRY_PERIOD = 3.0
    chaos_settings.KILN_CHAOS_MAX_CLOCK_SKEW = 0.5
    chaos_settings.KILN_CHAOS_REVERT_BUDGET = 1.0
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    thread, outcome, injection = controller_running(exp, holder="controller-a", backend=backend)
    time.sleep(0.1)  # into the controller's pause between renewals
    engaged = time.monotonic()
    lever_engage(actor=admin, reason="stop everything")
    thread.join(timeout=30)
    took = time.monotonic() - engaged
    assert outcome == ["aborted"]
    injection.refresh_from_db()
    assert injection.reverted_by == "system:chaos-controller"
    assert not actuators.in_effect(backend, injection.applied)
    assert took < 1.5, f"reverted {took:.2f} s after the lever: it waited for a renewal"


@pytest.fixture
def people(db, shop):
    users = get_user_model().objects
    engineer_group = Group.objects.get_or_create(name="engineer")[0]
    alice = users.create_user("alice")
    alice.groups.add(engineer_group)
    Membership.objects.create(user=alice, team=Team.objects.get(slug="payments"))
    root = users.create_user("root", is_superuser=True, is_staff=True)
    return {"alice": alice, "root": root}


@pytest.mark.django_db
def test_api_engage_list_and_release_with_the_refusals(api_client_for, shop):
    root = api_client_for("platform-admin", sub="root")
    alice = api_client_for("engineer", sub="alice", team="payments")
    sam = api_client_for("engineer", sub="sam", team="search")
    # Released by default, on the API before anyone moved it.
    listed = alice.get(LEVERS)
    assert listed.status_code == 200 and listed.json()[0]["engaged"] is False
    assert alice.post(f"{LEVERS}platform/engage/", {"reason": "x"}, format="json").status_code == (
        403
    )
    missing = root.post(f"{LEVERS}platform/engage/", {}, format="json")
    assert missing.status_code == 400 and "reason" in missing.json()["extra"]["fields"]
    assert not ChaosLever.objects.filter(engaged=True).exists()
    engaged = root.post(f"{LEVERS}platform/engage/", {"reason": "incident"}, format="json")
    assert engaged.status_code == 200 and engaged.json()["engaged_by"] == "root"
    refused = alice.post("/api/v1/chaos/experiments/", abort_data(), format="json")
    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "chaos_lever_engaged" and "engaged by root: incident" in body["message"]
    assert body["extra"]["lever"]["engaged_by"] == "root"
    assert alice.get(LEVERS).json()[0]["engaged"] is True
    # A team lever: its engineers; another team's engineer is refused with the rule.
    assert alice.post(
        f"{LEVERS}teams/payments/engage/", {"reason": "r"}, format="json"
    ).status_code == (200)
    other = sam.post(f"{LEVERS}teams/payments/release/", {"reason": "mine"}, format="json")
    assert other.status_code in (403, 404)
    assert ChaosLever.objects.get(team__slug="payments").engaged
    assert sam.post(f"{LEVERS}platform/release/", {"reason": "r"}, format="json").status_code == 403
    released = root.post(f"{LEVERS}platform/release/", {"reason": "over"}, format="json")
    assert released.status_code == 200 and released.json()["released_reason"] == "over"


@pytest.mark.django_db
def test_pages_show_the_lever_on_every_chaos_page_and_the_home_page(client, people, backend):
    client.force_login(people["root"])
    page = client.get(reverse("chaos:lever-list"))
    assert page.status_code == 200 and "Engage the platform lever" in page.content.decode()
    no_reason = client.post(reverse("chaos:lever-move", args=["engage"]), {"reason": ""})
    assert no_reason.status_code == 400 and "Say why you engage" in no_reason.content.decode()
    moved = client.post(reverse("chaos:lever-move", args=["engage"]), {"reason": "incident 9"})
    assert moved.status_code == 302
    for url in (
        reverse("chaos:experiment-list"),
        reverse("chaos:experiment-create"),
        reverse("chaos:lever-list"),
        reverse("home"),
    ):
        text = client.get(url).content.decode()
        assert "Safety lever engaged" in text and "incident 9" in text, url
    client.force_login(people["alice"])
    refused = client.post(reverse("chaos:lever-move", args=["release"]), {"reason": "mine"})
    assert refused.status_code == 403
    assert "Only platform admins release the platform lever" in refused.content.decode()
    assert ChaosLever.objects.get(scope="platform").engaged


@pytest.mark.django_db
def test_a_platform_admin_is_offered_every_teams_lever_a_member_its_own(client, people):
    Team.objects.get_or_create(slug="search", defaults={"name": "Search"})
    engage = "/chaos/levers/teams/{}/engage/"
    client.force_login(people["root"])
    page = client.get(reverse("chaos:lever-list")).content.decode()
    # Neither lever was ever moved: the admin may still engage both.
    assert not ChaosLever.objects.filter(scope="team").exists()
    assert engage.format("payments") in page and engage.format("search") in page
    client.force_login(people["alice"])
    page = client.get(reverse("chaos:lever-list")).content.decode()
    assert engage.format("payments") in page and engage.format("search") not in page
