# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""Chaos REST API and pages: roles, team ownership, create, list, detail with the lease, abort."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from audit.models import OutboxEvent
from canary.chaos import actuators
from canary.chaos.models import ChaosExperiment, ChaosInjection
from canary.chaos.services import fault_inject, fault_lease_acquire
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    audit_actions,
    backend,
    chaos_settings,
    shop,
)

pytestmark = pytest.mark.django_db

LIST = "/api/v1/chaos/experiments/"


def _create(client, **over):
    return client.post(LIST, abort_data(**over), format="json")


def test_anonymous_is_refused_and_nothing_is_created(client, shop):
    assert client.post(LIST, abort_data(), content_type="application/json").status_code in (
        401,
        403,
    )
    assert ChaosExperiment.objects.count() == 0


def test_auditor_cannot_create(api_client_for, shop):
    resp = _create(api_client_for("auditor", sub="audrey"))
    assert resp.status_code == 403 and resp.json()["code"] == "forbidden"
    assert ChaosExperiment.objects.count() == 0


def test_engineer_of_another_team_cannot_create(api_client_for, shop):
    resp = _create(api_client_for("engineer", sub="sam", team="search"))
    assert resp.status_code == 403
    assert ChaosExperiment.objects.count() == 0 and audit_actions() == []


def test_invalid_body_is_a_400_with_the_reason_and_changes_nothing(api_client_for, shop):
    client = api_client_for("engineer", sub="alice", team="payments")
    resp = _create(client, max_pods=None, max_percent=None)
    assert resp.status_code == 400 and "blast_radius" in resp.json()["extra"]["fields"]
    resp = _create(client, selector={})
    assert resp.status_code == 400 and "selector" in resp.json()["extra"]["fields"]
    assert ChaosExperiment.objects.count() == 0 and audit_actions() == []


@pytest.mark.parametrize("duration", [0, 86_401, 99_999_999_999])
def test_a_duration_out_of_range_names_the_platforms_limit(api_client_for, shop, duration):
    client = api_client_for("engineer", sub="alice", team="payments")
    resp = _create(client, duration_seconds=duration, max_duration_seconds=600)
    assert resp.status_code == 400
    said = resp.json()["extra"]["fields"]["duration_seconds"]
    assert "1 to 86400 seconds" in str(said) and "2147483647" not in str(said)
    assert ChaosExperiment.objects.count() == 0


@pytest.mark.parametrize("threshold", [1, 5, 1e300, True, -0.1])
def test_an_error_rate_stop_that_could_never_trip_is_refused(api_client_for, shop, threshold):
    client = api_client_for("engineer", sub="alice", team="payments")
    stop = {"kind": "error-rate-above", "threshold": threshold}
    resp = _create(client, service="web", stop_conditions=[stop])
    assert resp.status_code == 400, resp.content
    fields = resp.json()["extra"]["fields"]
    reason = str(fields.get("stop_conditions[0]") or fields)
    assert any(
        words in reason for words in ("below 1", "non-negative", "greater than or equal to 0")
    )
    assert ChaosExperiment.objects.count() == 0 and audit_actions() == []


def test_engineer_creates_lists_reads_and_aborts(api_client_for, shop, backend, clock):
    # The controlled clock stands still: the 1 s lease is still held when the detail is read,
    # however long a loaded machine takes between the acquire and the read.
    client = api_client_for("engineer", sub="alice", team="payments")
    resp = _create(client, stop_conditions=[{"kind": "error-rate-above", "threshold": 0.3}])
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    assert body["team"] == "payments" and body["status"] == "running"
    assert body["blast_radius"] == {"max_pods": 2, "max_percent": 25.0}
    assert body["timings"]["lease_duration"] == 1.0
    exp_id = body["id"]

    # A controller takes the lease and injects: the detail shows it live.
    term = fault_lease_acquire(experiment_id=exp_id, holder="controller-x")
    inj = fault_inject(experiment_id=exp_id, holder="controller-x", term=term, backend=backend)
    detail = client.get(f"{LIST}{exp_id}/").json()
    assert detail["lease"]["holder"] == "controller-x" and detail["lease"]["held"] is True
    assert detail["lease"]["term"] == 1 and detail["injections"][0]["state"] == "active"

    listed = client.get(LIST).json()
    assert [e["id"] for e in listed["results"]] == [exp_id]
    other = api_client_for("engineer", sub="sam", team="search")
    assert other.get(LIST).json()["results"] == []
    assert other.get(f"{LIST}{exp_id}/").status_code == 404
    assert other.post(f"{LIST}{exp_id}/abort/", {}, format="json").status_code == 404

    resp = client.post(f"{LIST}{exp_id}/abort/", {"reason": "seen enough"}, format="json")
    assert resp.status_code == 200 and resp.json()["status"] == "aborted"
    inj.refresh_from_db()
    assert inj.reverted_at is not None and not actuators.in_effect(backend, inj.applied)
    event = OutboxEvent.objects.get(action="chaos.experiment.aborted")
    assert event.actor == "alice" and event.data["reason"] == "seen enough"
    again = client.post(f"{LIST}{exp_id}/abort/", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "illegal_transition"


def test_auditor_reads_every_experiment(api_client_for, shop):
    _create(api_client_for("engineer", sub="alice", team="payments"))
    listed = api_client_for("auditor", sub="audrey").get(LIST).json()
    assert len(listed["results"]) == 1


def test_platform_admin_may_run_chaos_anywhere(api_client_for, shop):
    resp = _create(api_client_for("platform-admin", sub="root"), namespace="lab")
    assert resp.status_code == 201 and resp.json()["team"] == "search"


@pytest.fixture
def alice_browser(client, shop):
    from django.contrib.auth.models import Group

    from kiln.identity.models import Membership, Team

    user = get_user_model().objects.create_user("alice", password="pw-123456789")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    Membership.objects.create(user=user, team=Team.objects.get(slug="payments"))
    client.force_login(user)
    return client


def test_pages_create_list_detail_lease_and_abort(alice_browser, backend):
    client = alice_browser
    assert client.get(reverse("chaos:experiment-list")).status_code == 200
    assert client.get(reverse("chaos:experiment-create")).status_code == 200
    form = {
        "name": "delay web",
        "namespace": "shop",
        "selector": "app=web",
        "service": "web",
        "fault": "http-delay",
        "delay_ms": 300,
        "percent": 10,
        "duration_seconds": 60,
        "max_duration_seconds": 120,
        "max_pods": 1,
        "stop_error_rate": 10,  # percent: the condition keeps a fraction
        "stop_on_rollback": "on",
    }
    resp = client.post(reverse("chaos:experiment-create"), form)
    assert resp.status_code == 302
    exp = ChaosExperiment.objects.get()
    assert exp.selector == {"app": "web"} and exp.delay_ms == 300
    assert exp.stop_conditions == [
        {"kind": "error-rate-above", "threshold": 0.1},
        {"kind": "canary-rolled-back"},
    ]
    page = client.get(
        reverse("chaos:experiment-detail", kwargs={"experiment_id": exp.pk})
    ).content.decode()
    assert 'hx-trigger="every 1s"' in page and "delay web" in page
    term = fault_lease_acquire(experiment_id=exp.pk, holder="controller-y")
    fault_inject(experiment_id=exp.pk, holder="controller-y", term=term, backend=backend)
    url = reverse("chaos:experiment-lease", kwargs={"experiment_id": exp.pk})
    lease = client.get(url).content.decode()
    assert "controller-y" in lease and "Renewals" in lease
    injections = client.get(url, {"part": "injections"}).content.decode()
    assert "controller-y" in injections and "VirtualService/" in injections
    listing = client.get(reverse("chaos:experiment-list")).content.decode()
    assert "delay web" in listing and "controller-y" in listing
    resp = client.post(
        reverse("chaos:experiment-abort", kwargs={"experiment_id": exp.pk}), {"reason": "ui"}
    )
    assert resp.status_code == 302
    exp.refresh_from_db()
    assert exp.status == "aborted" and ChaosInjection.objects.get().reverted_at is not None


def test_create_page_shows_the_reason_and_creates_nothing_on_bad_input(alice_browser):
    resp = alice_browser.post(
        reverse("chaos:experiment-create"),
        {
            "name": "x",
            "namespace": "shop",
            "selector": "app",
            "fault": "pod-kill",
            "duration_seconds": 10,
            "max_duration_seconds": 5,
            "percent": 100,
        },
    )
    assert resp.status_code == 400
    assert "key=value" in resp.content.decode()
    assert ChaosExperiment.objects.count() == 0


def test_create_page_names_every_problem_in_one_round_and_creates_nothing(alice_browser):
    resp = alice_browser.post(
        reverse("chaos:experiment-create"),
        {
            "name": "abort lab",
            "namespace": "lab",  # team search's
            "selector": "app",
            "service": "web",
            "fault": "http-abort",
            "percent": 100,
            "duration_seconds": 10,
            "max_duration_seconds": 60,
            "max_pods": 1,
        },
    )
    # Django refuses the selector; the service still checks the namespace and the status.
    assert resp.status_code == 400
    errors = resp.context["form"].errors
    assert set(errors) == {"selector", "namespace", "abort_http_status"}
    page = resp.content.decode()
    assert "key=value" in page and "not a namespace your team owns" in page
    assert "HTTP status 400-599" in page and "never the whole namespace" not in page
    assert ChaosExperiment.objects.count() == 0 and audit_actions() == []


def test_the_service_field_is_offered_for_every_fault_as_its_stops_read_it(alice_browser):
    page = alice_browser.get(reverse("chaos:experiment-create")).content.decode()
    row = page[: page.index('name="service"')].rsplit('<div class="chaos-field"', 1)[1]
    assert "data-kinds" not in row  # shown whatever the fault, not for HTTP faults only


@pytest.mark.parametrize("percent", ["100", "1e300", "-1"])
def test_create_page_takes_the_error_rate_stop_in_percent_below_100(alice_browser, percent):
    resp = alice_browser.post(
        reverse("chaos:experiment-create"),
        {"name": "delay web", "namespace": "shop", "selector": "app=web", "service": "web",
         "fault": "http-delay", "delay_ms": 300, "percent": 10, "duration_seconds": 60,
         "max_duration_seconds": 120, "max_pods": 1, "stop_error_rate": percent},
    )  # fmt: skip
    assert resp.status_code == 400
    assert "stop_error_rate" in resp.context["form"].errors
    assert "Stop when error rate above (%)" in resp.content.decode()
    assert ChaosExperiment.objects.count() == 0


def test_create_page_offers_the_teams_namespaces_and_puts_the_blast_radius_on_its_field(
    alice_browser,
):
    from tests.canary.test_ownership_support import environment_in

    # A namespace of the team's environment still being provisioned is not offered: no pods.
    environment_in("payments-next", "payments", status="PROVISIONING")
    page = alice_browser.get(reverse("chaos:experiment-create")).content.decode()
    assert '<option value="shop">shop</option>' in page and 'value="lab"' not in page
    assert 'value="payments-next"' not in page
    assert "25 means about 1 request in 4" in page  # the percentages explained by example
    assert "with 8 matching pods, 25 means at most 2" in page
    resp = alice_browser.post(
        reverse("chaos:experiment-create"),
        {
            "name": "no radius",
            "namespace": "shop",
            "selector": "app=web",
            "fault": "pod-kill",
            "percent": 100,
            "duration_seconds": 10,
            "max_duration_seconds": 60,
        },
    )
    assert resp.status_code == 400
    form = resp.context["form"]
    assert form.non_field_errors() == []
    # The API's field names read as the form's labels.
    assert form.errors["max_pods"] == [
        "give a blast radius: a maximum number of pods (Blast radius: max pods), a maximum "
        "percentage of the matching pods (Blast radius: max %), or both"
    ]
    assert ChaosExperiment.objects.count() == 0


@pytest.mark.parametrize("max_pods", [0, 99_999_999_999])
def test_a_blast_radius_in_pods_names_one_range_at_either_end(api_client_for, shop, max_pods):
    client = api_client_for("engineer", sub="alice", team="payments")
    resp = _create(client, max_pods=max_pods, max_percent=None)
    assert resp.status_code == 400
    assert resp.json()["extra"]["fields"]["max_pods"] == "an integer from 1 to 2147483647"
    assert ChaosExperiment.objects.count() == 0


@pytest.mark.parametrize("max_pods", ["0", "3000000000"])
def test_the_form_names_the_same_pod_range_at_either_end(alice_browser, shop, max_pods):
    resp = alice_browser.post(
        reverse("chaos:experiment-create"),
        {"name": "radius", "namespace": "shop", "selector": "app=web", "fault": "pod-kill",
         "percent": 100, "duration_seconds": 10, "max_duration_seconds": 60,
         "max_pods": max_pods},
    )  # fmt: skip
    assert resp.status_code == 400
    assert resp.context["form"].errors["max_pods"] == ["an integer from 1 to 2147483647"]
    assert ChaosExperiment.objects.count() == 0
