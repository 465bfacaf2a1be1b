# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""Admission: no two experiments on overlapping targets unless both allow it (race-free on
PostgreSQL), and an Idempotency-Key (API header, the form's hidden token) makes a resubmission
the same experiment."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, connections, transaction
from django.urls import reverse

from audit.models import OutboxEvent
from canary.chaos.models import ChaosExperiment, ChaosLever
from canary.chaos.services import (
    ExperimentOverlaps,
    IdempotencyKeyReused,
    experiment_abort,
    experiment_create,
    experiment_submit,
)
from kiln.identity.models import Membership, Team
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    admin,
    backend,
    chaos_settings,
    engineer,
    shop,
)

LIST = "/api/v1/chaos/experiments/"


@pytest.mark.django_db
def test_an_overlapping_experiment_is_refused_naming_the_other_and_nothing_changes(
    engineer, shop, backend
):
    first = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    before = OutboxEvent.objects.count()
    # Same service host, another selector: the route is shared.
    with pytest.raises(ExperimentOverlaps) as host:
        experiment_create(
            actor=engineer, data=abort_data(name="b", selector={"tier": "x"}), backend=backend
        )
    assert host.value.http_status == 409
    assert f"overlaps experiment abort web ({first.pk}, running)" in host.value.message
    assert "both fault the service web.shop" in host.value.message
    assert host.value.extra["experiment"] == str(first.pk)
    # No service, intersecting selectors in the same namespace: a pod app=web,tier=front is both.
    with pytest.raises(ExperimentOverlaps, match="can match the same pods in namespace shop"):
        experiment_create(
            actor=engineer,
            data=abort_data(name="c", fault="pod-kill", service="", selector={"tier": "front"}),
            backend=backend,
        )
    assert ChaosExperiment.objects.count() == 1 and OutboxEvent.objects.count() == before
    # Disjoint selector (app=api, not app=web) on another service: admitted.
    experiment_create(
        actor=engineer,
        data=abort_data(name="d", selector={"app": "api"}, service="api"),
        backend=backend,
    )


@pytest.mark.django_db
def test_a_service_named_only_for_stop_metrics_is_not_a_faulted_service(engineer, shop, backend):
    # Two pod kills on disjoint pods, both reading their stops from web's traffic: no overlap.
    kill = {"fault": "pod-kill", "service": "web"}
    experiment_create(
        actor=engineer,
        data=abort_data(name="a", selector={"app": "cache"}, **kill),
        backend=backend,
    )
    experiment_create(
        actor=engineer, data=abort_data(name="b", selector={"app": "db"}, **kill), backend=backend
    )
    # An HTTP fault on web writes web's routes: it meets no pod kill on other pods either,
    # but a second HTTP fault on web's routes is refused.
    experiment_create(actor=engineer, data=abort_data(name="c"), backend=backend)
    with pytest.raises(ExperimentOverlaps, match="both fault the service web.shop"):
        experiment_create(
            actor=engineer, data=abort_data(name="d", selector={"app": "front"}), backend=backend
        )
    assert ChaosExperiment.objects.count() == 3


@pytest.mark.django_db
def test_both_must_allow_an_overlap_and_one_flag_alone_is_refused_saying_so(
    engineer, shop, backend
):
    experiment_create(actor=engineer, data=abort_data(), backend=backend)
    with pytest.raises(ExperimentOverlaps) as one:
        experiment_create(
            actor=engineer, data=abort_data(name="b", may_overlap=True), backend=backend
        )
    assert "this one allows overlaps but the other does not" in one.value.message
    assert one.value.extra["fields"] == {
        "may_overlap": ["this one allows overlaps but the other does not: both must say they may"]
    }
    first_ok = experiment_create(
        actor=engineer,
        data=abort_data(name="c", service="cart", selector={"app": "cart"}, may_overlap=True),
        backend=backend,
    )
    second_ok = experiment_create(
        actor=engineer,
        data=abort_data(name="d", service="cart", selector={"app": "cart"}, may_overlap=True),
        backend=backend,
    )
    assert first_ok.status == second_ok.status == "running"


@pytest.mark.django_db
def test_an_ended_experiment_no_longer_blocks_its_target(engineer, shop, backend):
    first = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    experiment_abort(actor=engineer, experiment=first, backend=backend)
    assert experiment_create(actor=engineer, data=abort_data(name="b"), backend=backend)


def _until_sessions_wait_on_a_lock(count: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    waiting = 0
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            waiting = cursor.fetchone()[0]
            if waiting >= count:
                return waiting
            time.sleep(0.01)
    return waiting


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_overlapping_creations_one_wins(engineer, shop, backend):
    platform = ChaosLever.objects.create(scope="platform")
    outcomes: list[str] = []
    start = threading.Barrier(2)

    def create(name: str) -> None:
        try:
            start.wait(5)
            experiment_create(actor=engineer, data=abort_data(name=name), backend=backend)
            outcomes.append("created")
        except ExperimentOverlaps:
            outcomes.append("refused")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=create, args=(n,)) for n in ("one", "two")]
    # Hold the platform lever's row, as a third creation would: both must queue behind it.
    with transaction.atomic():
        ChaosLever.objects.select_for_update().get(pk=platform.pk)
        for t in threads:
            t.start()
        waiting = _until_sessions_wait_on_a_lock(2)
    for t in threads:
        t.join(30)
    assert waiting >= 2, "the creations did not wait on the admission lock"
    assert sorted(outcomes) == ["created", "refused"]
    assert ChaosExperiment.objects.count() == 1


@pytest.mark.django_db
def test_api_idempotency_key_replays_the_first_experiment_and_refuses_another_body(
    api_client_for, shop
):
    client = api_client_for("engineer", sub="alice", team="payments")
    first = client.post(LIST, abort_data(), format="json", HTTP_IDEMPOTENCY_KEY="form-1")
    again = client.post(LIST, abort_data(), format="json", HTTP_IDEMPOTENCY_KEY="form-1")
    assert first.status_code == 201 and again.status_code == 200
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == first.json()["id"]
    assert ChaosExperiment.objects.count() == 1
    assert OutboxEvent.objects.filter(action="chaos.experiment.created").count() == 1
    other = client.post(
        LIST, abort_data(percent=10.0), format="json", HTTP_IDEMPOTENCY_KEY="form-1"
    )
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    # Without a key the same body is a second experiment, on the same target: an overlap.
    overlap = client.post(LIST, abort_data(), format="json")
    assert overlap.status_code == 409 and overlap.json()["code"] == "chaos_overlap"
    assert ChaosExperiment.objects.count() == 1


@pytest.mark.django_db
def test_a_replay_for_one_who_left_the_team_is_the_gets_404(api_client_for, shop):
    before = api_client_for("engineer", sub="alice", team="payments")
    first = before.post(LIST, abort_data(), format="json", HTTP_IDEMPOTENCY_KEY="moved-1")
    assert first.status_code == 201
    # The next token names another team only: alice may no longer see payments' experiments.
    after = api_client_for("engineer", sub="alice", team="search")
    assert after.get(f"{LIST}{first.json()['id']}/").status_code == 404
    again = after.post(LIST, abort_data(), format="json", HTTP_IDEMPOTENCY_KEY="moved-1")
    assert again.status_code == 404 and "payments" not in again.content.decode()
    assert ChaosExperiment.objects.count() == 1


@pytest.mark.django_db
def test_a_key_is_the_caller_s_own(engineer, admin, shop, backend):
    mine, created = experiment_submit(
        actor=engineer, data=abort_data(), backend=backend, idempotency_key="k"
    )
    assert created
    with pytest.raises(IdempotencyKeyReused):
        experiment_submit(
            actor=engineer, data=abort_data(name="x"), backend=backend, idempotency_key="k"
        )
    # Another person's same key is theirs: here it meets the overlap rule instead.
    with pytest.raises(ExperimentOverlaps):
        experiment_submit(actor=admin, data=abort_data(), backend=backend, idempotency_key="k")


@pytest.fixture
def alice_browser(client, shop):
    user = get_user_model().objects.create_user("alice", password="pw-123456789")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    Membership.objects.create(user=user, team=Team.objects.get(slug="payments"))
    client.force_login(user)
    return client


def _form(token: str, **over):
    data = {
        "name": "abort web",
        "namespace": "shop",
        "selector": "app=web",
        "service": "web",
        "fault": "http-abort",
        "abort_http_status": 503,
        "percent": 50,
        "duration_seconds": 60,
        "max_duration_seconds": 120,
        "max_pods": 2,
        "idempotency_key": token,
    }
    data.update(over)
    return data


@pytest.mark.django_db
def test_a_double_submitted_form_is_one_experiment(alice_browser):
    page = alice_browser.get(reverse("chaos:experiment-create")).content.decode()
    token = page.split('name="idempotency_key" value="')[1].split('"')[0]
    assert len(token) == 32
    first = alice_browser.post(reverse("chaos:experiment-create"), _form(token))
    second = alice_browser.post(reverse("chaos:experiment-create"), _form(token))
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"]
    assert ChaosExperiment.objects.count() == 1
    # A new form (a new token) on the same target is refused, naming the running experiment.
    refused = alice_browser.post(reverse("chaos:experiment-create"), _form("another-token"))
    assert refused.status_code == 409
    text = refused.content.decode()
    assert "overlaps experiment abort web" in text and "neither allows overlaps" in text
    assert ChaosExperiment.objects.count() == 1
