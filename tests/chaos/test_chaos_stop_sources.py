# ruff: noqa: F811 - fixtures are imported from the support modules and requested by name
"""Stop conditions read from the target service's metrics source, a real Prometheus scraping
Istio metrics: a breach aborts within one renewal, saying which condition and what value; the
server down or frozen past the read budget aborts rather than run blind, unless the experiment
says it may; the read never runs inside a transaction."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections, transaction

from audit.models import OutboxEvent
from canary.chaos.controller import chaos_controller_run
from canary.chaos.models import ChaosExperiment, ChaosInjection
from canary.chaos.services import experiment_create
from canary.chaos.stop_signals import read_signal, stop_conditions_check
from canary.models import MetricsSource, Service
from kiln.identity.models import Team
from tests.canary.conftest import istio_source, prometheus_factory  # noqa: F401
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    backend,
    chaos_settings,
    engineer,
    shop,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Renewals every 0.5 s; a read may take a third of the 3 s renew deadline (1 s).
TIMINGS = {
    "KILN_CHAOS_LEASE_DURATION": 6.0,
    "KILN_CHAOS_RENEW_DEADLINE": 3.0,
    "KILN_CHAOS_RETRY_PERIOD": 0.5,
    "KILN_CHAOS_MAX_CLOCK_SKEW": 0.5,
    "KILN_CHAOS_REVERT_BUDGET": 1.0,
}


@pytest.fixture
def measured(chaos_settings, shop, istio_source, prometheus_factory):
    """shop/web registered with a Prometheus metrics source that has scraped 100 requests of
    web, 40 of them failed, each taking 60 ms."""
    for key, value in TIMINGS.items():
        setattr(chaos_settings, key, value)
    chaos_settings.KILN_CHAOS_STOP_WINDOW_SECONDS = 120
    istio_source.observe("web", "shop", "v1", [60.0] * 100, errors=40)
    server = prometheus_factory(targets=[istio_source.address], scrape_interval=1)
    server.wait_scrapes(2)
    chaos_settings.KILN_PROMETHEUS_URL = server.url
    Service.objects.create(
        team=Team.objects.get(slug="payments"),
        name="web",
        namespace="shop",
        host="web.shop.svc.cluster.local",
        metrics_source=MetricsSource.PROMETHEUS,
    )
    return server


def _run(exp, backend, limit: float = 30.0) -> tuple[str, float]:
    stop = threading.Event()
    timer = threading.Timer(limit, stop.set)  # a safety net, never reached when it works
    timer.start()
    began = time.monotonic()
    try:
        outcome = chaos_controller_run(
            experiment_id=exp.pk, holder="controller-a", stop=stop, backend=backend
        )
        return outcome, time.monotonic() - began
    finally:
        timer.cancel()
        connections.close_all()


def test_an_error_rate_breach_read_from_prometheus_aborts_naming_condition_and_value(
    measured, engineer, backend
):
    exp = experiment_create(
        actor=engineer,
        data=abort_data(
            percent=5.0,
            stop_conditions=[
                {"kind": "latency-p99-above-ms", "threshold": 5000},
                {"kind": "error-rate-above", "threshold": 0.2},
            ],
        ),
        backend=backend,
    )
    outcome, took = _run(exp, backend)
    assert outcome == "aborted"
    exp.refresh_from_db()
    stopped = exp.end_evidence["stop_condition"]
    assert (stopped["outcome"], stopped["kind"], stopped["threshold"]) == (
        "breached",
        "error-rate-above",
        0.2,
    )
    # 40 failed of the 100 scraped; the fault itself (5%) never reached Prometheus.
    assert stopped["value"] == pytest.approx(0.4)
    assert stopped["source"] == f"prometheus {measured.url}"
    assert "error rate 0.4000" in exp.end_reason and "40 of 100 requests" in exp.end_reason
    aborted = OutboxEvent.objects.get(action="chaos.experiment.aborted")
    assert aborted.data["evidence"] == exp.end_evidence
    # The first renewal judged it: abort and revert well inside one renewal period after it.
    injection = ChaosInjection.objects.filter(experiment=exp).first()
    assert injection is None or injection.reverted_at is not None
    assert took < 5


def test_a_latency_breach_reads_the_histogram(measured, engineer, backend):
    exp = experiment_create(
        actor=engineer,
        data=abort_data(stop_conditions=[{"kind": "latency-p99-above-ms", "threshold": 10}]),
        backend=backend,
    )
    verdict = stop_conditions_check(exp)
    # 60 ms requests sit in Istio's (50, 100] bucket: read at its upper bound, conservatively.
    assert verdict.outcome == "breached" and verdict.value == pytest.approx(100.0)


def test_prometheus_down_aborts_rather_than_run_blind(measured, engineer, backend):
    exp = experiment_create(
        actor=engineer,
        data=abort_data(stop_conditions=[{"kind": "error-rate-above", "threshold": 0.9}]),
        backend=backend,
    )
    measured.stop()
    outcome, _ = _run(exp, backend)
    assert outcome == "aborted"
    exp.refresh_from_db()
    stopped = exp.end_evidence["stop_condition"]
    assert stopped["outcome"] == "unmeasurable" and stopped["value"] is None
    assert "cannot be evaluated: Prometheus is unreachable" in stopped["reason"]
    assert "does not run blind" in exp.end_reason


def test_prometheus_down_is_tolerated_when_the_experiment_says_so(measured, engineer, backend):
    exp = experiment_create(
        actor=engineer,
        data=abort_data(
            duration_seconds=2,
            max_duration_seconds=10,
            continue_without_metrics=True,
            stop_conditions=[{"kind": "error-rate-above", "threshold": 0.9}],
        ),
        backend=backend,
    )
    measured.stop()
    outcome, _ = _run(exp, backend)
    assert outcome == "completed"
    assert ChaosExperiment.objects.get(pk=exp.pk).end_reason == "duration elapsed"


def test_a_frozen_prometheus_costs_at_most_the_read_budget_then_aborts(measured, engineer, backend):
    exp = experiment_create(
        actor=engineer,
        data=abort_data(stop_conditions=[{"kind": "error-rate-above", "threshold": 0.9}]),
        backend=backend,
    )
    measured.pause()
    try:
        began = time.monotonic()
        verdict = stop_conditions_check(exp)
        assert time.monotonic() - began < 2.5  # the budget is 1 s (a third of renew_deadline)
        assert verdict.outcome == "unmeasurable" and "timed out" in verdict.reason
        outcome, _ = _run(exp, backend)
    finally:
        measured.resume()
    assert outcome == "aborted"
    assert ChaosExperiment.objects.get(pk=exp.pk).end_evidence["stop_condition"]["outcome"] == (
        "unmeasurable"
    )


def test_the_metrics_are_never_read_inside_a_transaction(measured, engineer, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    with transaction.atomic(), pytest.raises(RuntimeError, match="outside any transaction"):
        read_signal(exp, "error-rate", deadline=time.monotonic() + 1)
