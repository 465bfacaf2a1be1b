# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""Stop conditions: the experiment aborts itself when its condition trips, and the abort is audited."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from audit import record
from audit.models import OutboxEvent
from canary.chaos import actuators
from canary.chaos.controller import chaos_controller_run
from canary.chaos.models import ChaosExperiment, ChaosInjection
from canary.chaos.services import experiment_create
from canary.chaos.stop_signals import stop_conditions_check
from kiln.identity.permissions import system_actor
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    admin,
    backend,
    chaos_settings,
    engineer,
    shop,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _run_to_end(exp, backend) -> str:
    stop = threading.Event()
    timer = threading.Timer(20, stop.set)  # a safety net, never reached when the condition trips
    timer.start()
    try:
        return chaos_controller_run(
            experiment_id=exp.pk, holder="controller-a", stop=stop, backend=backend
        )
    finally:
        timer.cancel()
        connections.close_all()


def test_error_rate_condition_trips_on_the_injected_abort_and_the_abort_is_audited(
    engineer, shop, backend
):
    # 25% of requests aborted (blast radius) > 20% threshold: the simulated target sees it and the experiment stops.
    exp = experiment_create(
        actor=engineer,
        data=abort_data(
            percent=50.0,
            max_percent=25.0,
            stop_conditions=[{"kind": "error-rate-above", "threshold": 0.2}],
        ),
        backend=backend,
    )
    assert _run_to_end(exp, backend) == "aborted"
    exp.refresh_from_db()
    assert exp.status == "aborted" and exp.end_reason.startswith(
        "stop condition: error-rate-above 0.2: error rate 0.2500 (simulated cluster"
    )
    assert exp.end_evidence["stop_condition"]["value"] == 0.25
    inj = ChaosInjection.objects.get(experiment=exp)
    assert inj.reverted_at is not None and not actuators.in_effect(backend, inj.applied)
    aborted = OutboxEvent.objects.get(action="chaos.experiment.aborted")
    assert aborted.actor == "system:chaos-controller" and "error rate" in aborted.data["reason"]
    assert aborted.data["evidence"]["stop_condition"] == {
        "outcome": "breached",
        "kind": "error-rate-above",
        "threshold": 0.2,
        "value": 0.25,
        "source": "simulated cluster",
        "reason": "error-rate-above 0.2: error rate 0.2500 (simulated cluster)",
    }
    assert OutboxEvent.objects.filter(action="chaos.fault.reverted").count() == 1


def test_condition_below_threshold_lets_the_experiment_complete(engineer, shop, backend):
    exp = experiment_create(
        actor=engineer,
        data=abort_data(
            duration_seconds=1,
            max_duration_seconds=5,
            stop_conditions=[{"kind": "error-rate-above", "threshold": 0.5}],
        ),
        backend=backend,
    )
    assert _run_to_end(exp, backend) == "completed"
    exp.refresh_from_db()
    assert exp.status == "completed"
    assert not OutboxEvent.objects.filter(action="chaos.experiment.aborted").exists()
    assert ChaosInjection.objects.get(experiment=exp).reverted_at is not None


def test_a_canary_rolling_back_on_the_target_aborts_the_experiment(engineer, shop, backend):
    exp = experiment_create(
        actor=engineer,
        data=abort_data(percent=5.0, stop_conditions=[{"kind": "canary-rolled-back"}]),
        backend=backend,
    )
    exp.refresh_from_db()
    assert stop_conditions_check(exp).outcome == "hold"
    record(
        system_actor("canary-analyzer"),
        "canary.rollout.rolled_back",
        "canary.rollout:1",
        {"namespace": "shop", "service": "web"},
    )
    assert _run_to_end(exp, backend) == "aborted"
    assert (
        ChaosExperiment.objects.get(pk=exp.pk).end_reason
        == "stop condition: canary-rolled-back: a rollout of the target rolled back (audit chain)"
    )
    assert OutboxEvent.objects.filter(action="chaos.experiment.aborted").count() == 1
