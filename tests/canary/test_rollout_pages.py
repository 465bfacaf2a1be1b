"""Rollout pages: start from the portal, the dashboard explains the evidence, a person decides."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

from audit.models import OutboxEvent
from canary import selectors, services
from canary.models import Rollout, RolloutStatus
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor, actor_for_user
from tests.canary.test_ownership_support import own_namespace
from tests.kiln.pages import tables

pytestmark = pytest.mark.django_db

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))


@pytest.fixture
def service():
    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", "payments")
    return services.service_create(
        actor=ADMIN, team=team, name="checkout", namespace="shop", sim_traffic_class="low_traffic"
    )


def _login(client, name: str, role: str, team: str | None = None):
    user = get_user_model().objects.create_user(name, password="pw-123456789")
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    if team:
        Membership.objects.create(user=user, team=Team.objects.get(slug=team))
    client.force_login(user)
    return client


@pytest.fixture
def alice(client, service):
    return _login(client, "alice", "engineer", "payments")


def _start_form(service, **kw):
    form = {
        "service": str(service.pk),
        "baseline_version": "v1",
        "canary_version": "v2",
        "steps": "10, 100",
        "ticks_per_step": 4,
        "tick_seconds": 60,
        "alpha": 0.001,
        "beta": 0.05,
        "error_ratio": 2.0,
        "median_ratio": 1.3,
        "tail_ratio": 1.5,
        "max_ticks": 4,
    }
    form.update(kw)
    return form


@pytest.mark.parametrize("role", ["auditor", "approver"])
def test_who_may_not_start_a_rollout_is_not_offered_the_form(client, service, role):
    """An auditor sees every service and an approver its team's, but only engineers of the owning
    team start rollouts: neither is offered the button or the form only to be refused."""
    who = _login(client, "vic", role, "payments" if role == "approver" else None)
    assert selectors.service_list(viewer=_actor_of(who)).exists()
    listing = who.get(reverse("canary:rollout-list")).content.decode()
    assert "Start a rollout</a>" not in listing
    page = who.get(reverse("canary:rollout-new")).content.decode()
    assert 'id="rollout-new-none"' in page and 'id="rollout-new"' not in page
    refused = who.post(reverse("canary:rollout-new"), _start_form(service))
    assert refused.status_code == 400 and not Rollout.objects.exists()


def test_an_engineer_of_the_team_is_offered_its_services(alice, service):
    listing = alice.get(reverse("canary:rollout-list")).content.decode()
    assert "Start a rollout</a>" in listing
    page = alice.get(reverse("canary:rollout-new")).content.decode()
    assert 'id="rollout-new"' in page and f'value="{service.pk}"' in page


def _actor_of(client) -> Actor:
    return actor_for_user(get_user_model().objects.get(pk=client.session["_auth_user_id"]))


def _held(rollout: Rollout) -> Rollout:
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    for tick in range(1, 5):
        services.rollout_tick(rollout_id=rollout.pk, tick=tick)
    rollout.refresh_from_db()
    return rollout


def test_an_engineer_starts_a_rollout_from_the_portal(alice, service):
    page = alice.get(reverse("canary:rollout-new"))
    assert page.status_code == 200 and b"Max duration" in page.content
    response = alice.post(reverse("canary:rollout-new"), _start_form(service))
    rollout = Rollout.objects.get()
    assert response.status_code == 302 and response.url.endswith(f"/rollouts/{rollout.pk}/")
    assert rollout.steps == [10, 100] and rollout.config == {"max_ticks": 4}
    assert OutboxEvent.objects.filter(action="canary.rollout.created", actor="alice").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"alpha": 0.7}, b"alpha"),
        ({"error_ratio": 1.0}, b"design ratio"),
        ({"max_ticks": 1, "ticks_per_step": 4}, b"max duration"),
        ({"steps": "50, 25"}, b"increase"),
    ],
    ids=["alpha", "ratio", "max-duration", "steps"],
)
def test_impossible_settings_are_shown_on_the_form_and_nothing_starts(
    alice, service, overrides, message
):
    response = alice.post(reverse("canary:rollout-new"), _start_form(service, **overrides))
    assert response.status_code == 400 and message in response.content
    assert Rollout.objects.count() == 0


def test_the_start_form_names_every_problem_in_one_round_and_starts_nothing(alice, service):
    response = alice.post(
        reverse("canary:rollout-new"),
        _start_form(service, steps="50, 10", tick_seconds=0, alpha=2),
    )
    # Django refuses the tick; the service still checks the steps and the analysis settings.
    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"steps", "tick_seconds", "alpha"}
    page = response.content.decode()
    assert "increase" in page and "probability in [1e-12, 0.5)" in page
    assert "seconds from 0.2" not in page  # the tick's problem is said once, by Django
    assert Rollout.objects.count() == 0
    assert not OutboxEvent.objects.filter(action__startswith="canary.rollout.").exists()


def test_every_impossible_analysis_setting_is_named_at_once(alice, service):
    response = alice.post(
        reverse("canary:rollout-new"),
        _start_form(
            service, beta=2, error_ratio=-2, median_ratio=0, tail_ratio=0.5, canary_version="V2!"
        ),
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert set(errors) == {"beta", "error_ratio", "median_ratio", "tail_ratio", "canary_version"}
    assert "a design ratio must be greater than 1, got 0" in errors["median_ratio"][0]
    assert "lower-case letters, digits and '-'" in errors["canary_version"][0]
    assert Rollout.objects.count() == 0


def test_an_inconclusive_rollout_is_shown_plainly_with_what_would_settle_it(alice, service):
    rollout = _held(
        services.rollout_create(actor=ADMIN, service=service, **_rollout_kwargs(service))
    )
    assert rollout.status == RolloutStatus.INCONCLUSIVE
    page = alice.get(reverse("canary:rollout-detail", args=[rollout.pk])).content.decode()
    assert "Inconclusive — held at 10%" in page
    assert "What would settle it:" in page and "more canary requests" in page
    for term in ("LLR", "Bounds", "CUSUM", "SPRT", "Tick"):
        assert f"<strong>{term}</strong>" in page
    assert "docs/canary.md" in page
    listing = alice.get(reverse("canary:rollout-list")).content.decode()
    assert '<abbr title="analysis windows done' in listing
    assert "<strong>Requests still needed</strong>" in page
    # The engineer of the team may extend, retry or abort, not promote anyway.
    assert 'value="extend"' in page and 'value="retry"' in page and 'value="abort"' in page
    assert 'value="promote"' not in page
    assert 'data-finished="false"' in page


def _rollout_kwargs(service) -> dict:
    return {
        "baseline_version": "v1",
        "canary_version": "v2",
        "steps": [10, 100],
        "ticks_per_step": 4,
        "config": {"max_ticks": 4},
        "seed": 3,
    }


def test_the_dashboard_buttons_extend_with_a_reason_and_refuse_without(alice, service):
    rollout = _held(
        services.rollout_create(actor=ADMIN, service=service, **_rollout_kwargs(service))
    )
    url = reverse("canary:rollout-action", args=[rollout.pk])
    alice.post(url, {"action": "extend", "reason": ""})
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.INCONCLUSIVE
    response = alice.post(url, {"action": "extend", "reason": "lunch peak", "ticks": 3})
    assert response.status_code == 302
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.RUNNING and rollout.extra_ticks == 3
    event = OutboxEvent.objects.filter(action="canary.rollout.extended").get()
    assert event.actor == "alice" and "lunch peak" in event.data["reason"]


def test_a_steering_form_says_what_is_wrong_and_what_a_decision_did(alice, service):
    rollout = _held(
        services.rollout_create(actor=ADMIN, service=service, **_rollout_kwargs(service))
    )
    url = reverse("canary:rollout-action", args=[rollout.pk])
    said = alice.post(url, {"action": "abort", "reason": ""}, follow=True).content.decode()
    assert "Say why: a decision on a rollout needs a reason." in said
    said = alice.post(url, {"action": "abort", "reason": "x" * 2500}, follow=True).content.decode()
    assert "Nothing was done. Reason: Ensure this value has at most 2000 characters" in said
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.INCONCLUSIVE
    said = alice.post(url, {"action": "abort", "reason": "bad canary"}, follow=True)
    assert "Aborted: all the traffic is back on the baseline." in said.content.decode()


def test_an_auditor_cannot_steer_and_sees_no_buttons(client, service):
    rollout = _held(
        services.rollout_create(actor=ADMIN, service=service, **_rollout_kwargs(service))
    )
    auditor = _login(client, "dave", "auditor")
    page = auditor.get(reverse("canary:rollout-detail", args=[rollout.pk])).content.decode()
    assert 'id="steer"' not in page
    auditor.post(
        reverse("canary:rollout-action", args=[rollout.pk]), {"action": "abort", "reason": "x"}
    )
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.INCONCLUSIVE


def test_a_finished_rollout_is_marked_finished_not_live(alice, service):
    rollout = _held(
        services.rollout_create(actor=ADMIN, service=service, **_rollout_kwargs(service))
    )
    services.rollout_abort(actor=ADMIN, rollout=rollout, reason="done")
    rollout.decisions.create(  # as the analyzer words a step-up, to see it read in words
        tick=9, kind="step_advanced", actor="system:canary-analyzer", from_weight=10,
        to_weight=100, reason="no regression",
    )  # fmt: skip
    page = alice.get(reverse("canary:rollout-detail", args=[rollout.pk])).content.decode()
    assert 'data-finished="true"' in page and "<dt>Finished</dt>" in page
    rollout.refresh_from_db()
    assert f">{rollout.finished_at:%Y-%m-%d %H:%M:%S} UTC</span>" in page
    assert ">connecting<" not in page and 'id="steer"' not in page
    # Decisions in words ("step advanced", not the API's `step_advanced`), and the resolution
    # rule points at the rollout's own design ratios rather than the defaults'.
    kinds = [row[1] for row in tables(page)["decisions"][1:]]
    assert kinds == ["started", "inconclusive", "aborted", "step advanced"]
    assert "+25% median" not in page and "Design ratio</em> in the table below" in page
    # Finished: the evidence it ended on, and no talk of what promoting would still need.
    assert "The evidence it ended on" in page and "still needed to promote" not in page
    listing = alice.get(reverse("canary:rollout-list") + "?status=aborted").content.decode()
    assert "checkout" in listing


def _cells(tick: dict, keys: tuple[str, ...], decimals: int, scale: int = 1) -> list[str]:
    # A null statistic (a window without evidence) is a dash, else scaled to fixed decimals.
    return ["—" if tick[k] is None else f"{tick[k] * scale:.{decimals}f}" for k in keys]


def test_every_chart_has_its_series_as_a_table_one_row_a_tick(alice, service):
    rollout = _held(
        services.rollout_create(actor=ADMIN, service=service, **_rollout_kwargs(service))
    )
    ticks = selectors.rollout_ticks(rollout)
    assert len(ticks) >= 4
    page = alice.get(reverse("canary:rollout-detail", args=[rollout.pk])).content.decode()
    found = tables(page)
    assert found["table-weight"][0] == ["Tick", "canary %"]
    assert found["table-errors"][0] == ["Tick", "baseline", "canary"]
    assert found["table-sprt"][0] == ["Tick", "LLR", "roll back at", "accept at"]
    assert found["table-cusum"][0] == ["Tick", "CUSUM", "threshold"]
    for name in ("weight", "errors", "sprt", "cusum"):
        assert [row[0] for row in found[f"table-{name}"][1:]] == [str(t["tick"]) for t in ticks]
    assert [row[1:] for row in found["table-weight"][1:]] == [["10"]] * len(ticks)  # held at 10%
    for tick, row in zip(ticks, found["table-errors"][1:], strict=True):
        assert row[1:] == _cells(tick, ("baseline_error_rate", "canary_error_rate"), 3, 100)
    for tick, row in zip(ticks, found["table-sprt"][1:], strict=True):
        assert row[1:] == _cells(tick, ("llr", "llr_upper", "llr_lower"), 2)
    for tick, row in zip(ticks, found["table-cusum"][1:], strict=True):
        assert row[1:] == _cells(tick, ("cusum", "cusum_threshold"), 2)
    # Each drawing is an image named after its chart, its table one click away beneath it.
    assert page.count('role="img" aria-label="') == 4
    assert page.count('<details class="chart-data">') == 4
    assert "Error rate by arm (%): the data as a table" in page


def test_before_the_first_tick_each_table_says_there_is_none_yet(alice, service):
    rollout = services.rollout_create(actor=ADMIN, service=service, **_rollout_kwargs(service))
    found = tables(alice.get(reverse("canary:rollout-detail", args=[rollout.pk])).content.decode())
    for name in ("weight", "errors", "sprt", "cusum"):
        assert found[f"table-{name}"][1:] == [["No analysed tick yet."]]


def test_the_list_pages_25_rollouts_at_a_time_newest_first(alice, service):
    team = Team.objects.get(slug="payments")
    for i in range(26):  # one open rollout a service
        other = services.service_create(actor=ADMIN, team=team, name=f"s{i}", namespace="shop")
        services.rollout_create(actor=ADMIN, service=other, **_rollout_kwargs(other))
    first = alice.get(reverse("canary:rollout-list")).content.decode()
    rows = tables(first)[""][1:]
    assert len(rows) == 25 and rows[0][0] == "shop/s25"
    assert "page 1 of 2" in first and 'href="?page=2"' in first
    second = alice.get(reverse("canary:rollout-list") + "?page=2&status=pending").content.decode()
    assert [row[0] for row in tables(second)[""][1:]] == ["shop/s0"]
    assert "page 2 of 2" in second and 'href="?page=1&amp;status=pending"' in second
