"""Shared fixtures of the chaos tests (imported by each test_chaos_* module)."""

from __future__ import annotations

from typing import Any

import pytest

from kiln.identity.permissions import ENGINEER, PLATFORM_ADMIN, Actor

# Reaping starts renew_deadline + revert_budget + skew = 0.6 s after the last renewal, which leaves
# 0.4 s of the 1 s lease for the reaper pass itself on a busy two-core machine.
SHORT_TIMINGS = {
    "KILN_CHAOS_LEASE_DURATION": 1.0,
    "KILN_CHAOS_RENEW_DEADLINE": 0.4,
    "KILN_CHAOS_RETRY_PERIOD": 0.1,
    "KILN_CHAOS_MAX_CLOCK_SKEW": 0.1,
    "KILN_CHAOS_REVERT_BUDGET": 0.1,
}
REAPER_PERIOD = 0.25


@pytest.fixture
def chaos_settings(settings):
    """Short leases, the simulated cluster, no Celery controller on start."""
    for key, value in SHORT_TIMINGS.items():
        setattr(settings, key, value)
    settings.KILN_CHAOS_REAPER_PERIOD = REAPER_PERIOD
    settings.KILN_CHAOS_AUTORUN = False
    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    settings.KILN_SIM_FINALIZER_SECONDS = 0.0
    return settings


@pytest.fixture
def backend(chaos_settings):
    """The simulated cluster (DB-backed: every process sees it)."""
    from kiln.cluster.backends import get_backend

    return get_backend("simulated")


@pytest.fixture
def shop(backend):
    """Team payments owning namespace `shop` with four `app=web` pods; team search owning `lab`."""
    from kiln.identity.models import Team

    Team.objects.get_or_create(slug="payments", defaults={"name": "Payments"})
    Team.objects.get_or_create(slug="search", defaults={"name": "Search"})
    backend.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "shop", "labels": {"kiln.dev/team": "payments"}},
            },
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "lab", "labels": {"kiln.dev/team": "search"}},
            },
        ]
        + [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{i}", "namespace": "shop", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]},
            }
            for i in range(4)
        ]
    )
    return "shop"


@pytest.fixture
def engineer() -> Actor:
    """An engineer of team payments."""
    return Actor(username="alice", roles=frozenset({ENGINEER}), teams=frozenset({"payments"}))


@pytest.fixture
def admin() -> Actor:
    """A platform admin."""
    return Actor(username="root", roles=frozenset({PLATFORM_ADMIN}))


def abort_data(**over: Any) -> dict[str, Any]:
    """A valid HTTP-abort experiment on shop/web."""
    data: dict[str, Any] = {
        "name": "abort web",
        "namespace": "shop",
        "selector": {"app": "web"},
        "service": "web",
        "fault": "http-abort",
        "abort_http_status": 503,
        "percent": 50.0,
        "duration_seconds": 60,
        "max_duration_seconds": 120,
        "max_pods": 2,
        "max_percent": 25.0,
        "stop_conditions": [],
    }
    data.update(over)
    return data


def audit_actions(target_prefix: str = "chaos.chaosexperiment:") -> list[str]:
    """Actions of the audit outbox rows about chaos experiments, in order."""
    from audit.models import OutboxEvent

    return list(
        OutboxEvent.objects.filter(target__startswith=target_prefix)
        .order_by("id")
        .values_list("action", flat=True)
    )


def stray_fault(experiment_id: Any, term: int = 7) -> dict[str, Any]:
    """An HTTP-abort VirtualService on shop/web under `term`, which no live injection owns: a
    lost holder's late write, for the reaper to sweep."""
    from canary.chaos import actuators

    spec = actuators.FaultSpec(
        experiment_id=str(experiment_id),
        namespace="shop",
        selector={"app": "web"},
        fault="http-abort",
        service="web",
        abort_http_status=500,
    )
    return actuators.virtual_service_fault(spec, term)


def controller_running(experiment, *, holder: str, backend, timeout: float = 30.0):
    """Start a controller for `experiment` in a thread and wait until its fault is active;
    returns (thread, outcome list, injection). The outcome list gets the controller's result."""
    import threading
    import time

    from django.db import connections

    from canary.chaos.controller import chaos_controller_run
    from canary.chaos.models import ChaosInjection

    outcome: list[str] = []

    def run() -> None:
        try:
            outcome.append(
                chaos_controller_run(experiment_id=experiment.pk, holder=holder, backend=backend)
            )
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + timeout
    while not ChaosInjection.objects.filter(experiment=experiment, state="active").exists():
        assert time.monotonic() < deadline, "the controller never injected"
        time.sleep(0.02)
    return thread, outcome, ChaosInjection.objects.get(experiment=experiment)


def signed_in_engineer(client, django_user_model):
    """`client` signed in as alice, an engineer of team payments."""
    from django.contrib.auth.models import Group

    from kiln.identity.models import Membership, Team

    user = django_user_model.objects.create_user("alice", password="pw-long-enough-1")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    Membership.objects.create(user=user, team=Team.objects.get(slug="payments"))
    client.force_login(user)
    return client
