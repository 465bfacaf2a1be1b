"""Liveness, readiness and metrics endpoints."""

import os
import subprocess
import sys

import pytest
from django.conf import settings


def test_healthz_answers_without_touching_the_database(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_database_and_redis(client):
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["database"]["vendor"] == "postgresql"
    assert body["checks"]["redis"]["ok"] is True


@pytest.mark.django_db
def test_readyz_is_503_with_the_failed_check_named_when_redis_is_unreachable(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["redis"] == {"ok": False, "error": "ConnectionError"}


@pytest.mark.django_db
def test_metrics_expose_request_counters_in_prometheus_text(client):
    client.get("/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert (
        'kiln_http_requests_total{method="GET",route="healthz",status="200"}'
        in response.content.decode()
    )


@pytest.mark.django_db
def test_metrics_of_every_web_process_are_summed(client, tmp_path, monkeypatch):
    """Under PROMETHEUS_MULTIPROC_DIR (the web as `uvicorn --workers`), /metrics answers the
    sum of what every process counted, whichever process the scrape lands on."""
    count = (
        "from kiln.observability import HTTP_REQUESTS; "
        "HTTP_REQUESTS.labels('GET', 'healthz', '200').inc({n})"
    )
    for n in (2, 3):  # two web processes, each with its own count
        subprocess.run(
            [sys.executable, "-c", count.format(n=n)],
            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
            cwd=settings.BASE_DIR,
            check=True,
        )
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    text = client.get("/metrics").content.decode()
    assert 'kiln_http_requests_total{method="GET",route="healthz",status="200"} 5.0' in text
