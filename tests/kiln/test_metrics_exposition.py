"""Every process kind's /metrics passes `promtool check metrics`; probes mean something."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest
from celery import signals
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone

import audit
from audit.chain.metrics import LagWatch
from kiln import celery_metrics, health, metrics_server, observability
from kiln.celery import app as celery_app
from kiln.identity.permissions import system_actor
from scheduler.extender.handler import EXTENDER_ERRORS, EXTENDER_SECONDS
from scheduler.extender.probes import ExtenderState
from scheduler.models import CommitmentSample

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def promtool_check(text: str) -> subprocess.CompletedProcess:
    """`promtool check metrics` on an exposition; a missing promtool fails (make prometheus-tools)."""
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )


def get(server: metrics_server.MetricsServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def serve():
    started: list[metrics_server.MetricsServer] = []

    def start(kind: str, **checks) -> metrics_server.MetricsServer:
        server = metrics_server.start(kind, port=0, host="127.0.0.1", **checks)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def figures(db):
    """Something in every family: a commitment sample, an unchained event, labelled counts."""
    spread = {"min": 0.1, "p50": 0.25, "p90": 0.4, "max": 0.5}
    CommitmentSample.objects.create(
        taken_at=timezone.now(),
        nodes=3,
        figures={
            "pending_pods": 1,
            "resources": {
                "cpu": {
                    "ratio": 0.25,
                    "committed": 2000,
                    "capacity": 8000,
                    "pending": 8000,
                    "pending_ratio": 1.0,
                    "stranded": 0,
                    "spread": spread,
                },
                "memory": {
                    "ratio": 0.5,
                    "committed": 2**30,
                    "capacity": 2**31,
                    "pending": 0,
                    "pending_ratio": 0.0,
                    "stranded": 0,
                    "spread": spread,
                },
            },
        },
    )
    audit.record(system_actor("seed"), "kiln.test.recorded", "kiln:test:1", {})
    EXTENDER_SECONDS.labels("filter").observe(0.003)
    EXTENDER_ERRORS.labels("filter", "malformed").inc()
    celery_metrics.on_task_failure(sender=celery_app.tasks["chaos.tasks.chaos_reap"])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", observability.KINDS)
def test_each_process_kinds_metrics_pass_promtool(kind, figures, serve):
    if kind == "web":
        text = Client().get("/metrics").content.decode()
    else:
        if kind == "scheduler-extender":
            state = ExtenderState()
            state.not_after = 1_900_000_000.0
            state.inventory_loaded(3)
            observability.add_scrape_collector(state, kind=kind)
        status, text = get(serve(kind), "/metrics")
        assert status == 200
    result = promtool_check(text)
    assert result.returncode == 0 and not result.stdout and not result.stderr, (
        result.stdout + result.stderr
    )
    assert "_created" not in text
    expected = {
        "web": [
            'kiln_workload_commitment_node_ratio{resource="cpu",statistic="max"} 0.5',
            "kiln_workload_commitment_committed_cpu_cores 2.0",
        ],
        "worker": ['kiln_celery_task_failures_total{task="chaos.tasks.chaos_reap"}'],
        "beat": [
            'kiln_celery_queue_messages{queue="celery"}',
            "# TYPE kiln_portal_reaper_backlog_environments gauge",
        ],
        "audit-writer": ["kiln_audit_outbox_events 1.0", "kiln_audit_writer_lag_seconds "],
        "scheduler-extender": [
            'kiln_scheduler_extender_request_duration_seconds_bucket{le="0.005",verb="filter"}',
            "kiln_scheduler_extender_certificate_expiry_timestamp_seconds 1.9e+09",
        ],
        "chaos-reaper": [
            "kiln_chaos_faults_past_lease 0.0",
            "kiln_chaos_faults_unconfirmed 0.0",
        ],
    }[kind]
    for line in expected:
        assert line in text, line


def test_promtool_refuses_what_the_web_exported_before():
    """The check can fail: a `quantile` label on a gauge is what the web exported before."""
    text = (
        "# HELP kiln_workload_commitment_node_ratio Spread\n"
        "# TYPE kiln_workload_commitment_node_ratio gauge\n"
        'kiln_workload_commitment_node_ratio{quantile="max",resource="cpu"} 0.5\n'
    )
    assert promtool_check(text).returncode != 0


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_broker_does_not_answer_is_not_ready(serve, settings):
    server = serve("worker", ready=celery_metrics._ready_checks())
    status, body = get(server, "/readyz")
    assert status == 200, body
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    status, body = get(server, "/readyz")
    assert status == 503
    checks = json.loads(body)["checks"]
    assert checks["broker"] == {"ok": False, "error": "ConnectionError"}
    assert checks["database"]["ok"] is True
    assert get(server, "/healthz")[0] == 200  # not ready, still live: no restart for a broker


@pytest.mark.parametrize(
    "lags, live",
    [
        ([10.0, 20.0, 30.0], [True, True, True]),  # growing, but under the bound of 60 s
        ([70.0, 80.0], [True, False]),  # past the bound and grew since the last probe
        ([90.0, 80.0], [True, True]),  # past the bound but falling: the writer is chaining
        ([61.0, 61.0], [True, True]),  # past the bound, not growing
    ],
    ids=["under-bound", "past-and-growing", "past-and-falling", "past-and-flat"],
)
def test_writer_liveness_fails_only_when_its_lag_grows_past_the_bound(lags, live):
    watch = LagWatch(bound=60.0)
    assert [watch.judge(lag) for lag in lags] == live


@pytest.mark.django_db(transaction=True)
def test_a_stuck_writer_is_not_live_over_http(serve):
    audit.record(system_actor("seed"), "kiln.test.recorded", "kiln:test:2", {})
    server = serve("audit-writer", live={"lag": LagWatch(bound=0.0).check})
    assert get(server, "/healthz")[0] == 200  # the first probe has nothing to compare with
    status, body = get(server, "/healthz")  # nothing chained since: the oldest event aged
    assert status == 503
    assert json.loads(body)["status"] == "not live"


def test_the_extender_is_not_ready_until_its_inventory_is_loaded(serve):
    state = ExtenderState()
    server = serve("scheduler-extender", ready={"inventory": state.inventory_check})
    status, body = get(server, "/readyz")
    assert status == 503 and json.loads(body)["checks"]["inventory"]["ok"] is False
    state.inventory_loaded(12)
    status, body = get(server, "/readyz")
    assert status == 200 and json.loads(body)["checks"]["inventory"] == {"ok": True, "nodes": 12}


def test_unknown_paths_are_404_with_a_reason(serve):
    status, body = get(serve("beat"), "/nope")
    assert status == 404 and json.loads(body)["code"] == "not_found"


def test_no_server_starts_without_kiln_metrics_port(monkeypatch):
    monkeypatch.delenv("KILN_METRICS_PORT", raising=False)
    assert metrics_server.start_from_env("worker") is None
    monkeypatch.setenv("KILN_METRICS_PORT", "ninety")
    with pytest.raises(ImproperlyConfigured, match="KILN_METRICS_PORT"):
        metrics_server.start_from_env("worker")


@pytest.mark.django_db(transaction=True)
def test_a_task_that_raises_is_counted_by_name():
    task = celery_app.tasks["chaos.tasks.chaos_reap"]
    before = celery_metrics.TASK_FAILURES.labels(task.name)._value.get()
    signals.task_failure.send(sender=task, task_id="t1", exception=RuntimeError("x"))
    assert celery_metrics.TASK_FAILURES.labels(task.name)._value.get() == before + 1
    assert health.broker()["ok"] is True
