"""Portal pages: request form with estimate, list, detail with timeline and progress, approvals, showback."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import OutboxEvent
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import Actor
from portal import selectors
from portal.conf import MAX_CPU
from portal.lifecycle import TTL_EXPIRED_PREFIX
from portal.models import Environment
from scheduler.models import InstanceType, NodeLifetime, SpotPrice
from tests.kiln.pages import tables

pytestmark = pytest.mark.django_db


def login(username: str, role: str, team: Team | None = None) -> Client:
    user = get_user_model().objects.create_user(username)
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)
    if team:
        Membership.objects.create(user=user, team=team)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def team(db) -> Team:
    return Team.objects.create(slug="payments", name="Payments")


FORM = {
    "team": "payments",
    "name": "web",
    "env_class": "staging",
    "ttl_hours": "48",
    "workload_class": "standard",
    "cpu": "4",
    "memory_gib": "16",
    "gpu": "0",
    "justification": "",
}


def alice_with_a_dev_environment(team, capture) -> tuple[Client, Environment]:
    """Alice, an engineer of the team, logged in, and the dev environment she asked for."""
    alice = login("alice", "engineer", team)
    with capture(execute=True):
        alice.post(reverse("portal:environment-request"), {**FORM, "env_class": "dev"})
    return alice, Environment.objects.get()


def test_request_form_renders_with_estimate_and_validates(team):
    alice = login("alice", "engineer", team)
    page = alice.get(reverse("portal:environment-request"))
    assert page.status_code == 200
    assert b'hx-get="/environments/estimate/"' in page.content and b"/ hour" in page.content
    bad = alice.post(
        reverse("portal:environment-request"), {**FORM, "name": "Bad_Name", "ttl_hours": "5000"}
    )
    assert bad.status_code == 200
    assert b"DNS-1123" in bad.content and b"exceeds the staging limit" in bad.content
    assert Environment.objects.count() == 0


def test_request_form_names_every_problem_in_one_round_and_creates_nothing(team):
    alice = login("alice", "engineer", team)
    bad = alice.post(
        reverse("portal:environment-request"),
        {**FORM, "env_class": "dev", "name": "Bad_Name", "ttl_hours": "9999", "cpu": "-1"},
    )
    # The shared rules check every field, the CPU's bounds in the API's words.
    errors = bad.context["form"].errors
    assert set(errors) == {"name", "ttl_hours", "cpu"}
    page = bad.content.decode()
    assert "DNS-1123" in page and "exceeds the dev limit" in page
    assert errors["cpu"] == [f"Must be a whole number from 1 to {MAX_CPU}."]  # as the API says
    assert Environment.objects.count() == 0 and OutboxEvent.objects.count() == 0


def test_a_denied_request_is_announced_as_an_error_with_the_policy_reason(team):
    alice = login("alice", "engineer", team)
    response = alice.post(
        reverse("portal:environment-request"), {**FORM, "spot_node_pool": "on"}, follow=True
    )
    env = Environment.objects.get()
    assert env.status == "DENIED"
    page = response.content.decode()
    assert '<li class="msg error">Requested payments-web: denied by policy.' in page
    assert "spot node pools are for ephemeral and dev" in page
    assert 'class="msg success"' not in page
    # The policies' own words, not their file names and the object they checked.
    message = page[page.index('<li class="msg error">') :].split("</li>")[0]
    assert "on EnvironmentRequest" not in message and message.endswith("See the Policy tab.")
    # The policy tab says which stage its checks were at: the request form counts only these.
    detail = alice.get(reverse("portal:environment-detail", kwargs={"public_id": env.public_id}))
    checks = env.policy_decisions.count()
    assert f"denied</span> of {checks} checks ({checks} on the request)." in detail.content.decode()


def test_the_policy_tab_counts_the_checks_of_each_stage(team):
    alice = login("alice", "engineer", team)
    alice.post(reverse("portal:environment-request"), FORM)
    env = Environment.objects.get()
    on_request = env.policy_decisions.filter(stage="request").count()
    on_manifests = env.policy_decisions.filter(stage="manifest").count()
    assert on_request > 0 and on_manifests > 1
    page = alice.get(reverse("portal:environment-detail", kwargs={"public_id": env.public_id}))
    assert (
        f"All {on_request + on_manifests} policy checks allowed ({on_request} on the request, "
        f"{on_manifests} on the composed manifests)"
    ) in page.content.decode()


def test_the_actions_card_says_what_is_happening_while_there_is_nothing_to_do(team):
    alice = login("alice", "engineer", team)
    alice.post(reverse("portal:environment-request"), FORM)
    env = Environment.objects.get()
    url = reverse("portal:environment-detail", kwargs={"public_id": env.public_id})
    assert "Waiting for approval: nothing to do until an approver decides" in (
        alice.get(url).content.decode()
    )
    Environment.objects.filter(pk=env.pk).update(status="PROVISIONING")
    page = alice.get(url).content.decode()
    assert (
        '<p class="muted" id="actions-waiting">Provisioning: nothing to do until it is ready'
        in page
    )


def test_request_form_submits_and_redirects_to_detail(team):
    alice = login("alice", "engineer", team)
    response = alice.post(reverse("portal:environment-request"), FORM)
    env = Environment.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(
        f"/environments/{env.public_id}/"
    )
    detail = alice.get(response["Location"])
    assert b"payments-web" in detail.content and b"Waiting for approval" in detail.content
    assert b"PENDING_APPROVAL" not in detail.content  # statuses are words on the page
    assert b"Requested" in detail.content  # timeline from audit events
    listing = alice.get(reverse("portal:environment-list"))
    assert b"payments-web" in listing.content


def test_estimate_partial_prices_the_form(team):
    alice = login("alice", "engineer", team)
    response = alice.get(
        reverse("portal:environment-estimate"),
        {"cpu": "8", "memory_gib": "16", "ttl_hours": "10", "env_class": "dev"},
    )
    assert response.status_code == 200 and b"m6i.xlarge" in response.content


def test_auditor_cannot_request_and_engineer_cannot_open_the_queue(team):
    assert login("erin", "auditor").get(reverse("portal:environment-request")).status_code == 403
    assert login("alice", "engineer", team).get(reverse("portal:approval-queue")).status_code == 403


def test_approver_decides_from_the_queue_and_rejection_needs_a_reason(team):
    alice = login("alice", "engineer", team)
    alice.post(reverse("portal:environment-request"), FORM)
    env = Environment.objects.get()
    carol = login("carol", "approver", team)
    queue = carol.get(reverse("portal:approval-queue"))
    assert b"payments-web" in queue.content
    carol.post(
        reverse("portal:environment-decide", args=[env.public_id]),
        {"decision": "reject", "reason": ""},
    )
    env.refresh_from_db()
    assert env.status == "PENDING_APPROVAL"
    carol.post(
        reverse("portal:environment-decide", args=[env.public_id]),
        {"decision": "reject", "reason": "too big", "next": "https://evil.example/"},
    )
    env.refresh_from_db()
    assert env.status == "REJECTED"


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_decision_with_a_reason_too_long_is_refused_whole_not_taken_without_it(team, decision):
    alice = login("alice", "engineer", team)
    alice.post(reverse("portal:environment-request"), FORM)
    env = Environment.objects.get()
    carol = login("carol", "approver", team)
    decide = reverse("portal:environment-decide", args=[env.public_id])
    page = carol.post(decide, {"decision": decision, "reason": "x" * 2500}, follow=True)
    words = page.content.decode()
    assert "Nothing was decided. Reason: Ensure this value has at most 2000 characters" in words
    # No maxlength: a browser would cut a pasted reason short without a word, and decide.
    assert 'placeholder="reason (to reject)"' in words and 'maxlength="2000"' not in words
    env.refresh_from_db()
    assert env.status == "PENDING_APPROVAL" and not env.decisions.exists()


def test_a_decision_on_a_request_decided_meanwhile_is_refused_in_words(team):
    alice = login("alice", "engineer", team)
    alice.post(reverse("portal:environment-request"), FORM)
    env = Environment.objects.get()
    decide = reverse("portal:environment-decide", args=[env.public_id])
    login("frank", "approver", team).post(decide, {"decision": "reject", "reason": "too big"})
    carol = login("carol", "approver", team)  # her queue still showed it
    page = carol.post(decide, {"decision": "approve"}, follow=True).content.decode()
    assert "its status is Rejected" in page  # at the top: its row is gone
    # Somebody who has no queue hears the refusal on the request's own page.
    refused = alice.post(decide, {"decision": "approve"}, follow=True)
    assert refused.status_code == 200 and refused.redirect_chain[-1][0].endswith(
        reverse("portal:environment-detail", args=[env.public_id])
    )
    said = refused.content.decode()
    assert "Only approvers may approve" in said or "its status is Rejected" in said


def test_a_teardown_reason_too_long_is_refused_not_replaced(
    team, django_capture_on_commit_callbacks
):
    alice, env = alice_with_a_dev_environment(team, django_capture_on_commit_callbacks)
    page = alice.post(
        reverse("portal:environment-teardown", args=[env.public_id]),
        {"reason": "x" * 2500, "confirm": env.name},
        follow=True,
    ).content.decode()
    assert "Nothing was torn down. Reason: Ensure this value has at most 2000" in page
    env.refresh_from_db()
    assert env.status == "READY"


def test_a_name_the_team_has_taken_is_refused_on_the_name_field(team):
    alice = login("alice", "engineer", team)
    alice.post(reverse("portal:environment-request"), FORM)
    again = alice.post(reverse("portal:environment-request"), FORM)
    assert again.status_code == 200
    assert again.context["form"].errors["name"] == [
        "payments already has an environment named web: choose another name."
    ]
    assert Environment.objects.count() == 1


def test_progress_partial_polls_while_active_and_detail_shows_manifests(
    team, django_capture_on_commit_callbacks
):
    alice, env = alice_with_a_dev_environment(team, django_capture_on_commit_callbacks)
    assert env.status == "READY"
    detail = alice.get(reverse("portal:environment-detail", args=[env.public_id]))
    assert b"kind: ResourceQuota" in detail.content and b"Extend TTL" in detail.content
    progress = alice.get(
        reverse("portal:environment-progress", args=[env.public_id]), {"was": "PROVISIONING"}
    )
    assert progress["HX-Refresh"] == "true" and b'hx-trigger="every 2s"' not in progress.content
    Environment.objects.filter(pk=env.pk).update(status="PROVISIONING")
    live = alice.get(reverse("portal:environment-progress", args=[env.public_id]))
    assert b'hx-trigger="every 2s"' in live.content


@pytest.mark.parametrize(
    ("action", "data", "words"),
    [
        ("extend", {"hours": "999999999999"},
         "A dev environment lives at most 336 h in all: this one can be extended by at most 2"),
        ("extend", {"hours": "soon"}, "Nothing was extended. Hours: Enter a whole number."),
        # The class's limit has nothing to do with 0 hours: only the field's problem is said.
        ("extend", {"hours": "0"},
         "Nothing was extended. Hours: Ensure this value is greater than or equal to 1."),
        (
            "defer",
            {"minutes": "99999999999999", "reason": "demo"},
            "teardown may wait at most 240 minutes past its expiry.",
        ),
        (
            "defer",
            {"minutes": "30", "reason": "x" * 3000},
            "Reason: Ensure this value has at most 500 characters (it has 3000).",
        ),
    ],
)  # fmt: skip
def test_an_out_of_range_extension_or_deferral_names_the_classs_limit(
    team, django_capture_on_commit_callbacks, action, data, words
):
    alice, env = alice_with_a_dev_environment(team, django_capture_on_commit_callbacks)
    before = (env.expires_at, env.deferred_until)
    page = alice.post(
        reverse(f"portal:environment-{action}", args=[env.public_id]), data, follow=True
    )
    assert words in page.content.decode()
    assert "8760" not in page.content.decode()  # one limit: the class's
    env.refresh_from_db()
    assert (env.expires_at, env.deferred_until) == before


def test_a_refused_deferral_or_extension_shows_what_was_typed_once(
    team, django_capture_on_commit_callbacks
):
    alice, env = alice_with_a_dev_environment(team, django_capture_on_commit_callbacks)
    detail = reverse("portal:environment-detail", args=[env.public_id])
    refused = {"minutes": "300", "reason": "release freeze"}  # the class allows 240
    page = alice.post(
        reverse("portal:environment-defer", args=[env.public_id]), refused, follow=True
    ).content.decode()
    assert "at most 240 minutes" in page
    assert 'name="minutes" min="1" max="240" value="300"' in page
    assert 'value="release freeze"' in page
    again = alice.get(detail).content.decode()  # once: the next visit shows the defaults
    assert 'value="300"' not in again and 'name="minutes" min="1" max="240" value="30"' in again
    page = alice.post(
        reverse("portal:environment-extend", args=[env.public_id]), {"hours": "9999"}, follow=True
    ).content.decode()
    assert 'name="hours" min="1" value="9999"' in page
    other = Environment.objects.exclude(pk=env.pk)  # kept only for the page it came from
    assert not other.exists() and 'value="9999"' not in alice.get(detail).content.decode()


def test_extend_and_teardown_from_the_detail_page(team, django_capture_on_commit_callbacks):
    alice, env = alice_with_a_dev_environment(team, django_capture_on_commit_callbacks)
    before = env.expires_at
    alice.post(reverse("portal:environment-extend", args=[env.public_id]), {"hours": "12"})
    env.refresh_from_db()
    assert (env.expires_at - before).total_seconds() == 12 * 3600
    alice.post(
        reverse("portal:environment-teardown", args=[env.public_id]),
        {"reason": "done", "confirm": "wrong"},
    )
    env.refresh_from_db()
    assert env.status == "READY"  # the name was not typed: nothing happens
    alice.post(
        reverse("portal:environment-teardown", args=[env.public_id]),
        {"reason": "done", "confirm": env.name},
    )
    env.refresh_from_db()
    assert env.status in ("EXPIRING", "TEARING_DOWN")


def test_the_actions_card_says_who_asked_for_a_teardown(team, django_capture_on_commit_callbacks):
    alice, env = alice_with_a_dev_environment(team, django_capture_on_commit_callbacks)
    page = reverse("portal:environment-detail", args=[env.public_id])
    Environment.objects.filter(pk=env.pk).update(status="EXPIRING", status_reason="done")
    asked = alice.get(page).content.decode()
    assert "Teardown requested: it is torn down next." in asked and "TTL ran out" not in asked
    reaped = f"{TTL_EXPIRED_PREFIX} its TTL ended"
    Environment.objects.filter(pk=env.pk).update(status_reason=reaped)
    assert "Expiring: its TTL ran out" in alice.get(page).content.decode()


def test_other_teams_environment_is_404_and_showback_renders(
    team, django_capture_on_commit_callbacks
):
    alice, env = alice_with_a_dev_environment(team, django_capture_on_commit_callbacks)
    other = Team.objects.create(slug="search", name="Search")
    bob = login("bob", "engineer", other)
    assert bob.get(reverse("portal:environment-detail", args=[env.public_id])).status_code == 404
    showback = alice.get(reverse("portal:showback"))
    assert showback.status_code == 200 and b"payments-web" in showback.content


def test_showback_prices_the_node_hours_the_environments_pool_ran_beside_the_estimate(
    team, django_capture_on_commit_callbacks
):
    alice, env = alice_with_a_dev_environment(team, django_capture_on_commit_callbacks)
    m6i = InstanceType.objects.create(
        name="m6i.xlarge",
        family="m6i",
        vcpu=4,
        memory_gib=Decimal("16"),
        on_demand_hourly=Decimal("0.2000"),
    )
    SpotPrice.objects.create(
        instance_type=m6i,
        zone="eu-west-1a",
        hourly=Decimal("0.0800"),
        interruption_bucket=0,
        observed_at=timezone.now(),
    )
    now = timezone.now()
    Environment.objects.filter(pk=env.pk).update(created_at=now - timedelta(hours=5))
    start = now - timedelta(hours=4)
    # Two hours on-demand ($0.40) and 1.5 hours spot in eu-west-1a ($0.12): $0.52 from what ran.
    for name, capacity, hours in (("ip-1", "on-demand", 2), ("ip-2", "spot", 1.5)):
        NodeLifetime.objects.create(
            name=name, environment=env.namespace, nodepool=f"kiln-{env.namespace}", instance_type="m6i.xlarge",
            zone="eu-west-1a", capacity_type=capacity, launched_at=start, removed_at=start + timedelta(hours=hours),
        )  # fmt: skip
    # A node of another environment's pool is not this environment's.
    NodeLifetime.objects.create(
        name="ip-9",
        environment="other-ns",
        instance_type="m6i.xlarge",
        launched_at=start,
        removed_at=now,
    )
    (row,) = selectors.team_showback(viewer=system_view())
    ran = row["environments"][0]["ran"]
    assert (ran.nodes, ran.node_hours, ran.cost) == (2, Decimal("3.5000"), Decimal("0.52"))
    assert row["ran_total"] == Decimal("0.52")
    page = alice.get(reverse("portal:showback")).content.decode()
    assert "Spend from what ran" in page and "$0.52" in page and "3.50" in page
    # Its status in the words every page uses, not the stored constant.
    assert "<td>Ready</td>" in page and "<td>READY</td>" not in page


def system_view():
    """An actor who sees every team's showback."""
    return Actor(username="root", roles=frozenset({"platform-admin"}))


def test_showback_period_counts_only_hours_inside_it_and_lists_teams_at_zero(
    team, django_capture_on_commit_callbacks
):
    alice = login("alice", "engineer", team)
    Team.objects.create(slug="search", name="Search")
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        alice.post(reverse("portal:environment-request"), {**FORM, "env_class": "dev"})
    env = Environment.objects.get()
    # Up for the last 10 days at $1/h: 7 days in a 7-day period, all 10 in 30 days.
    Environment.objects.filter(pk=env.pk).update(
        hourly_cost=Decimal("1.00"),
        created_at=now - timedelta(days=10),
        ready_at=now - timedelta(days=10),
    )
    (week,) = selectors.team_showback(
        viewer=system_view(), team="payments", since=now - timedelta(days=7)
    )
    assert Decimal("167.9") < week["total"] <= Decimal("168.01")
    rows = {r["team"]: r for r in selectors.team_showback(viewer=system_view())}
    assert rows["search"]["total"] == Decimal("0.00") and rows["search"]["environments"] == []
    assert Decimal("239.9") < rows["payments"]["total"] <= Decimal("240.01")
    page = alice.get(reverse("portal:showback"), {"period": "7d"}).content.decode()
    assert page.count("<rect ") == 7 and "Spend by day as a table" in page
    # Beneath the bars: the first and last day, the highest day ($24 at $1/h) and the total.
    days = [(now - timedelta(days=n)).strftime("%b %-d") for n in (6, 0)]
    axis = page[page.index('id="spend-axis"') :].split("</p>")[0]
    assert f"<span>{days[0]}</span>" in axis and f"<span>{days[1]}</span>" in axis
    assert "highest day $24.00" in axis and "in all $" in axis
    # The total under the chart is the team's, over the same days (not its rounded bars').
    header = page[page.index('data-team="payments"') :].split("</h2>")[0]
    total = header.split("estimated $")[1].split("<")[0]
    assert f"in all ${total}" in axis
    main = page[page.index("<main") : page.index("</main>")]  # the header has a search box
    assert "search" not in main  # alice sees her own team only
    csv = alice.get(reverse("portal:showback-csv"), {"period": "30d"})
    lines = csv.content.decode().splitlines()
    assert csv["Content-Disposition"] == 'attachment; filename="showback-30d.csv"'
    assert lines[0].startswith("team,environment") and lines[1].startswith("payments,")
    assert len(lines) == 2
    refused = alice.get(reverse("portal:showback"), {"period": "forever"})
    assert (
        refused.status_code == 400
        and "The showback period must be one of" in refused.content.decode()
    )
    assert "<html" in refused.content.decode()  # the site's page, not a line of text


def test_an_approval_that_is_not_yet_enough_says_how_many_more_it_waits_for(team):
    alice = login("alice", "engineer", team)
    prod = {"env_class": "prod", "ttl_hours": "1000", "justification": "launch of the checkout"}
    alice.post(reverse("portal:environment-request"), {**FORM, **prod})
    env = Environment.objects.get()
    assert env.status == "PENDING_APPROVAL"
    decide = reverse("portal:environment-decide", args=[env.public_id])
    carol = login("carol", "approver", team)
    page = carol.post(decide, {"decision": "approve"}, follow=True).content.decode()
    assert f"Your approval of {env.namespace} is recorded: 1 of 2." in page
    assert "It waits for 1 more approver." in page and f"Approved {env.namespace}." not in page
    env.refresh_from_db()
    assert env.status == "PENDING_APPROVAL"
    # The request's page no longer offers carol a decision she has made.
    detail = carol.get(reverse("portal:environment-detail", args=[env.public_id])).content.decode()
    assert 'id="actions-decided"' in detail and 'value="approve"' not in detail
    frank = login("frank", "approver", team)
    page = frank.post(decide, {"decision": "approve"}, follow=True).content.decode()
    assert f"Approved {env.namespace}." in page


def test_the_list_shows_no_expiry_or_price_for_an_environment_that_has_ended(
    team, django_capture_on_commit_callbacks
):
    alice = login("alice", "engineer", team)
    with django_capture_on_commit_callbacks(execute=True):
        alice.post(reverse("portal:environment-request"), {**FORM, "env_class": "dev"})
        alice.post(
            reverse("portal:environment-request"), {**FORM, "name": "gone", "env_class": "dev"}
        )
    Environment.objects.filter(name="gone").update(status="DELETED")
    rows = {
        row[0].split()[0]: row
        for row in tables(alice.get(reverse("portal:environment-list")).content.decode())[""][1:]
    }
    assert rows["gone"][5:] == ["—", "—"]
    assert rows["web"][5] != "—" and rows["web"][6] != "—"


def test_a_request_is_announced_with_its_status_in_words(team):
    alice = login("alice", "engineer", team)
    page = alice.post(
        reverse("portal:environment-request"), {**FORM, "env_class": "staging"}, follow=True
    ).content.decode()
    assert '<li class="msg success">Requested payments-web: Waiting for approval.</li>' in page
