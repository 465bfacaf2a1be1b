"""web_bench end to end, small: the web answers every create, the report holds a run per round
with its figures, and the bench leaves nothing waiting for an approver."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.conf import settings as django_settings

from bench.portal import harness
from portal.models import Environment
from tests.audit.conftest import subprocess_env, wipe_chain


@pytest.fixture
def chain_wiped_after(transactional_db):
    yield
    wipe_chain()


def _bench(settings, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "web_bench", *args],
        cwd=django_settings.BASE_DIR,
        env=subprocess_env(settings),
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.django_db(transaction=True)
def test_web_bench_measures_each_round_and_rejects_what_it_made(settings, chain_wiped_after):
    out = _bench(settings, "--rounds", "2", "--clients", "2", "--requests", "2", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["command"].startswith("python manage.py web_bench")
    assert [(r["round"], r["requests"]) for r in report["runs"]] == [(1, 4), (2, 4)]
    for run in report["runs"]:
        assert run["web_cpu_ms_per_request"] > 0 and 0 < run["p50_ms"] <= run["p95_ms"]
    assert set(report["medians"]) == {
        "web_cpu_ms_per_request", "p50_ms", "p95_ms", "requests_per_second"
    }  # fmt: skip
    made = Environment.objects.filter(team__slug=harness.TEAM)
    assert made.count() == 2 * (2 * 2 + 2)  # per round: the measured creates and the warm-ups
    assert set(made.values_list("status", flat=True)) == {"REJECTED"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--clients", "0"], "--clients must be at least 1"),
    ],
)
def test_web_bench_refuses_bad_arguments_with_the_reason(settings, args, reason):
    out = _bench(settings, *args)
    assert out.returncode != 0 and reason in out.stderr
