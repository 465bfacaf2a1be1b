"""canary_promote_bench drives rollouts end to end through the API, Celery and the database."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from audit.models import ChainEvent
from canary.models import Rollout, RolloutStatus
from kiln.cluster.models import SimulatedObject
from tests.audit.conftest import wipe_chain

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def chain_wiped_after():
    """The bench's audit writer commits chain rows; empty the chain so the flush succeeds."""
    yield
    wipe_chain()


def test_promote_bench_promotes_every_rollout_and_reports_json(chain_wiped_after):
    out = StringIO()
    call_command(
        "canary_promote_bench",
        "--rollouts",
        "3",
        "--concurrency",
        "2",
        "--namespaces",
        "2",
        "--json",
        stdout=out,
    )
    report = json.loads(out.getvalue())
    assert report["rollouts"] == 3
    # A separate prefork worker process (the `make dev` shape) on the shared broker did the ticks.
    assert report["worker"] == "prefork" and report["worker_concurrency"] == 2
    assert len(report["load_average_before"]) == 3 and report["cpus"] >= 1
    assert report["outcomes"]["promoted"] == 3
    assert report["wall_seconds"] > 0 and report["rollouts_per_second"] > 0
    assert report["audit_chain_caught_up_after_seconds"] >= 0
    assert Rollout.objects.filter(status=RolloutStatus.PROMOTED).count() == 3
    # Promoted on evidence: every channel accepted within the rollout's max duration (6 ticks).
    assert all(1 <= r.ticks.count() <= 6 for r in Rollout.objects.all())
    assert report["ticks_per_rollout"] == round(
        sum(r.ticks.count() for r in Rollout.objects.all()) / 3, 2
    )
    for rollout in Rollout.objects.all():
        last = rollout.ticks.order_by("-number").first().decision
        assert all(c["accepted"] for c in last["channels"].values())
    # Three services over two namespaces.
    assert report["namespaces"] == 2
    assert len({r.service.namespace for r in Rollout.objects.select_related("service")}) == 2
    # The bench runs an audit writer beside the worker: the rollouts' events reach the chain.
    targets = [f"canary.rollout:{pk}" for pk in Rollout.objects.values_list("pk", flat=True)]
    promoted = ChainEvent.objects.filter(action="canary.rollout.promoted", target__in=targets)
    assert sorted(promoted.values_list("target", flat=True)) == sorted(targets)


def test_promote_bench_on_the_kubernetes_backend_reports_each_client_against_its_limits(
    chain_wiped_after,
):
    out = StringIO()
    call_command(
        "canary_promote_bench", "--rollouts", "3", "--concurrency", "2", "--kube-api", "local",
        "--kube-qps", "4", "--json", stdout=out,
    )  # fmt: skip
    report = json.loads(out.getvalue())
    assert report["backend"] == "kubernetes" and report["outcomes"]["promoted"] == 3
    api = report["kube_api"]
    assert api["client_limits"]["qps"] == 4.0 and api["requests"] > 0
    assert {"GET", "PATCH"} <= set(api["by_method"])
    # This process and the worker's pool processes, each named by its pid.
    clients = api["clients"]
    assert len(clients) >= 2 and all(pid.isdigit() for pid in clients)
    assert sum(c["requests"] for c in clients.values()) == api["requests"]
    burst = api["client_limits"]["burst"]
    for client in clients.values():
        # n requests through a bucket of `burst` tokens refilled at 4/s need (n - burst) / 4 s.
        assert client["throttle_floor_seconds"] == round(max(0, client["requests"] - burst) / 4, 2)
        assert 1 <= client["peak_requests_in_a_second"] <= client["requests"]
    assert api["throttle_floor_seconds"] == max(
        c["throttle_floor_seconds"] for c in clients.values()
    )
    assert api["throttling_shapes_time"] == (
        api["throttle_floor_seconds"] >= 0.5 * api["window_seconds"]
    )
    # The rollouts' VirtualServices live on that API server, not in the simulated cluster.
    assert not SimulatedObject.objects.filter(kind="VirtualService").exists()


def test_a_worker_keeps_its_database_connection_across_tasks():
    from celery.fixups.django import DjangoWorkerFixup

    from kiln.celery import app

    # Unset, Celery closes the connection around every task: a new connection per tick.
    assert DjangoWorkerFixup(app).db_reuse_max >= 100
