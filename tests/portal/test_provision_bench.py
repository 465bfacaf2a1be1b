"""provision_bench end to end in its production shape (a prefork worker and an audit writer on
Redis), small: every request reaches READY, nothing is lost or duplicated, and the report holds
the figures docs/portal.md describes."""

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
    assert (report["worker"], report["arrival"], report["warmup_requests"]) == (
        "prefork",
        "closed",
        2,
    )
    zero = report["profiles"]["zero"]
    assert (zero["ready"], zero["failed"], zero["lost"], zero["duplicated"]) == (10, 0, 0, 0)
    assert zero["errors"] == {}
    assert 0 < zero["p50_seconds"] <= zero["p95_seconds"] <= zero["max_seconds"]
    assert zero["cpu_ms_per_environment"]["worker_and_audit_writer"] > 0
    # Warm-up and measured requests alike were created once and handed to teardown.
    bench = Environment.objects.filter(team__slug="kiln-bench")
    assert bench.count() == 12
    assert not bench.exclude(status__in=["DELETED", "TEARING_DOWN", "EXPIRING"]).exists()


@pytest.mark.django_db(transaction=True)
def test_a_pool_smaller_than_the_clients_is_refused_with_the_size_it_needs(settings):
    """Each client thread keeps a connection of the bench's process: with fewer pooled
    connections than clients the run would wait on itself, so it is refused before it starts."""
    env = {**subprocess_env(settings), "KILN_DB_POOL_MAX": "4"}
    out = subprocess.run(
        [sys.executable, "manage.py", "provision_bench", "--concurrency", "3", "--json"],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "--concurrency 3 needs KILN_DB_POOL_MAX >= 5 (it is 4)" in out.stderr
