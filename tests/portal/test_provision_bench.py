"""provision_bench end to end, small: in its production shape (the web over HTTP, a prefork
worker and an audit writer on Redis) and with the API in its own process beside a prefork worker,
every request reaches READY, nothing is lost or duplicated, and the report holds the figures
docs/portal.md describes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.conf import settings as django_settings

from portal.models import Environment
from tests.audit.conftest import subprocess_env, wipe_chain


@pytest.fixture
def chain_wiped_after(transactional_db):
    """The bench's audit writer commits chain rows; empty the chain so the flush succeeds."""
    yield
    wipe_chain()


@pytest.mark.django_db(transaction=True)
def test_provision_bench_drives_every_request_to_ready_and_tears_it_down(
    settings, chain_wiped_after
):
    env = subprocess_env(settings)
    out = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "provision_bench",
            "--requests",
            "10",
            "--concurrency",
            "3",
            "--warmup",
            "2",
            "--profile",
            "zero",
            "--json",
        ],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert (report["api"], report["worker"], report["arrival"], report["warmup_requests"]) == (
        "http",
        "prefork",
        "closed",
        2,
    )
    zero = report["profiles"]["zero"]
    assert (zero["ready"], zero["failed"], zero["lost"], zero["duplicated"]) == (10, 0, 0, 0)
    assert zero["errors"] == {}
    assert 0 < zero["p50_seconds"] <= zero["p95_seconds"] <= zero["max_seconds"]
    cpu = zero["cpu_ms_per_environment"]
    assert set(cpu) == {"bench_process", "web", "worker_and_audit_writer"}
    assert cpu["web"] > 0 and cpu["worker_and_audit_writer"] > 0
    database = report["earlier_work_before_start"]["zero"]["database"]
    assert database["vacuumed"] is (database["autovacuum"] is False)
    assert database["dead_rows"] >= 0
    # Warm-up and measured requests alike were created once and handed to teardown.
    bench = Environment.objects.filter(team__slug="kiln-bench")
    assert bench.count() == 12
    assert not bench.exclude(status__in=["DELETED", "TEARING_DOWN", "EXPIRING"]).exists()


@pytest.mark.django_db(transaction=True)
def test_the_api_in_the_bench_process_beside_a_prefork_worker_reaches_ready_too(
    settings, chain_wiped_after
):
    out = subprocess.run(
        [sys.executable, "manage.py", "provision_bench", "--api", "client", "--requests", "4",
         "--concurrency", "2", "--warmup", "1", "--profile", "zero", "--json"],
        cwd=django_settings.BASE_DIR,
        env=subprocess_env(settings),
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert (report["api"], report["worker"]) == ("client", "prefork")
    zero = report["profiles"]["zero"]
    assert (zero["ready"], zero["lost"], zero["duplicated"], zero["errors"]) == (4, 0, 0, {})
    assert set(zero["cpu_ms_per_environment"]) == {"bench_process", "worker_and_audit_writer"}


def test_the_http_api_needs_the_production_shape(settings):
    out = subprocess.run(
        [sys.executable, "manage.py", "provision_bench", "--api", "http", "--worker", "threads"],
        cwd=django_settings.BASE_DIR,
        env=subprocess_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "--api http runs the production shape: it needs --worker prefork" in out.stderr


@pytest.mark.django_db(transaction=True)
def test_a_pool_smaller_than_the_clients_is_refused_with_the_size_it_needs(settings):
    """Each client thread keeps a connection of the bench's process: with fewer pooled
    connections than clients the run would wait on itself, so it is refused before it starts."""
    env = {**subprocess_env(settings), "KILN_DB_POOL_MAX": "4"}
    out = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "provision_bench",
            "--api",
            "client",
            "--concurrency",
            "3",
            "--json",
        ],  # fmt: skip
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "--concurrency 3 needs KILN_DB_POOL_MAX >= 5 (it is 4)" in out.stderr
