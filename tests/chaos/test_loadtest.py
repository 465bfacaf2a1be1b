"""The load test in a tiny bounded mode, so that it cannot rot: the real processes (uvicorn web,
prefork worker, beat, audit writer, extender) under the locust mix over HTTP for a few
seconds, then the reconciliation. The real runs are `manage.py loadtest` (docs/benchmarks.md)."""

from __future__ import annotations

import json

import pytest

from bench.loadtest.run import Plan, run
from tests.audit.conftest import subprocess_env, wipe_chain
from tests.kiln.standalone_process import free_port


@pytest.fixture
def chain_wiped_after(transactional_db):
    """The run's audit writer commits chain rows; empty the chain so the flush succeeds."""
    yield
    wipe_chain()


@pytest.mark.django_db(transaction=True)
def test_tiny_load_run_reconciles_with_nothing_lost_and_every_malformed_call_refused(
    settings, chain_wiped_after, tmp_path, monkeypatch
):
    environment = subprocess_env(settings)
    for name in ("DATABASE_URL", "REDIS_URL", "KILN_AUDIT_STREAM", "KILN_AUDIT_GROUP",
                 "KILN_AUDIT_SIGNING_KEY", "KILN_AUDIT_ANCHORS", "SECRET_KEY"):  # fmt: skip
        monkeypatch.setenv(name, environment[name])
    report = run(
        Plan(port=free_port(), engineers=2, environments=2, dashboards=1, max_seconds=60,
             node_list_size=20, worker_concurrency=1, think=(0.1, 0.3)),
        workdir=tmp_path,
    )  # fmt: skip
    reconciled = report["reconciliation"]
    assert reconciled["ok"], json.dumps(report, default=str)[:6000]
    assert reconciled["environments_acknowledged"] == 4
    assert reconciled["statuses"].get("DELETED", 0) >= 4  # the four and the rollout's READY one
    assert reconciled["chain"]["ok"] and reconciled["chain"]["checked"] > 0
    assert report["request_to_ready"]["environments"] == 4
    assert (
        0 < report["request_to_ready"]["p50_seconds"] <= report["request_to_ready"]["p95_seconds"]
    )
    by_class = report["request_to_ready"]["by_class"]
    assert by_class["dev"]["environments"] + by_class["staging"]["environments"] == 4
    assert report["server_errors"] == 0, report["errors"]
    malformed = report["malformed"]
    assert malformed.get("sent", 0) == malformed.get("answered_4xx_with_reason", 0)
    routes = report["routes"]
    # Engineers follow their environment with waiting reads, answered when it changes: a few per
    # environment (one per status change), not a spin of immediate 304s.
    waits = routes["GET /environments/{id}/ (Prefer: wait)"]["requests"]
    assert 0 < waits <= 6 * 4, waits
    assert "Prefer: wait" in report["api_p95_excludes"]
    for route in ("POST /environments/", "DELETE /environments/{id}/",
                  "POST extender /scheduler/filter", "WS connect /ws/rollouts/{id}/"):  # fmt: skip
        assert routes[route]["requests"] > 0, sorted(routes)
        assert routes[route]["p50_ms"] <= routes[route]["p95_ms"] <= routes[route]["p99_ms"]
    # Kiln's processes, the servers beneath them and the load generator, which share the cores.
    assert set(report["cpu_ms_per_environment"]) == {
        "web", "worker", "beat", "writer", "extender", "postgres", "redis", "load_generator"
    }  # fmt: skip
    assert all(ms > 0 for ms in report["cpu_ms_per_environment"].values())
    assert 0 < report["machine_busy_share"] <= 1
    assert report["environments_per_second"] > 0
    # The web's collections, read from its /metrics: young ones at least, in every run.
    assert report["web_gc_freeze"] is True
    assert report["web_gc_pauses"]["0"]["count"] > 0, report["web_gc_pauses"]
    assert report["plan"]["think"] == (0.1, 0.3)
