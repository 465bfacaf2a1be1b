# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""Standalone runs the chaos controllers in its in-process worker: stopping Kiln stops them at
once (each reverts its fault and gives its lease up) rather than wait for their experiments to
end, and starting Kiln queues a controller for every experiment still running."""

from __future__ import annotations

import time

import pytest
from celery.signals import before_task_publish

from canary.chaos import actuators
from canary.chaos.controller import allow_controllers
from canary.chaos.models import ChaosExperiment, ChaosLease, ExperimentStatus
from canary.chaos.services import CONTROLLER_TASK, experiment_abort, experiment_create
from canary.chaos.standalone import controllers_service
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    backend,
    chaos_settings,
    controller_running,
    engineer,
    shop,
)
from tests.support.celery_conf import celery_conf


@pytest.fixture
def controllers():
    """The in-process controllers as standalone runs them; allowed again afterwards."""
    yield controllers_service()
    allow_controllers()


@pytest.mark.django_db(transaction=True)
def test_stopping_kiln_stops_every_controller_at_once(engineer, shop, backend, controllers):
    # Renewals 3 s apart and a ten-minute experiment: the stop answers well before either.
    exp = experiment_create(
        actor=engineer, data=abort_data(duration_seconds=600, max_duration_seconds=900),
        backend=backend,
    )  # fmt: skip
    ChaosExperiment.objects.filter(pk=exp.pk).update(
        lease_duration=10.0, renew_deadline=5.0, retry_period=3.0, max_clock_skew=0.5,
        revert_budget=1.0,
    )  # fmt: skip
    thread, outcome, injection = controller_running(exp, holder="in-process", backend=backend)
    time.sleep(0.1)  # into the controller's pause between renewals
    stopping = time.monotonic()
    controllers.stop()  # returns once the controller has reverted and returned
    took = time.monotonic() - stopping
    thread.join(timeout=30)
    assert outcome == ["stopped"] and took < 1.5, (outcome, took)
    injection.refresh_from_db()
    assert injection.revert_reason == "controller stopped"
    assert not actuators.in_effect(backend, injection.applied)
    assert ChaosLease.objects.get(pk=exp.pk).holder == ""
    # The experiment itself goes on: the next start resumes it.
    assert ChaosExperiment.objects.get(pk=exp.pk).status == ExperimentStatus.RUNNING


@pytest.mark.django_db
def test_starting_kiln_queues_a_controller_for_every_running_experiment(
    engineer, shop, backend, controllers, chaos_settings
):
    running = experiment_create(
        actor=engineer, data=abort_data(name="one", may_overlap=True), backend=backend
    )
    ended = experiment_create(
        actor=engineer, data=abort_data(name="two", may_overlap=True), backend=backend
    )
    experiment_abort(actor=engineer, experiment=ended, backend=backend)
    chaos_settings.KILN_CHAOS_AUTORUN = True
    published: list[tuple[str, str]] = []

    def seen(sender=None, headers=None, body=None, **kwargs) -> None:
        published.append((headers["task"], body[0][0]))

    before_task_publish.connect(seen)
    try:
        with celery_conf(broker_url="memory://localhost/"):
            controllers.start()
    finally:
        before_task_publish.disconnect(seen)
    assert published == [(CONTROLLER_TASK, str(running.pk))]
