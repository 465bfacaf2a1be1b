"""Start-up refuses a configuration that cannot deliver the audit chain; waiting commands give up.

Outside standalone, every process must share one audit topic (Redis). A process configured
without it would chain nothing, so settings refuse to load, naming REDIS_URL, for every
command and server alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
BASE_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SECRET_KEY": "a-secret"}
SHOW_MODE = "from django.conf import settings as s; print('standalone', s.STANDALONE)"


def run(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        env={**BASE_ENV, "DJANGO_SETTINGS_MODULE": "kiln.settings", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "env",
    [
        {"DATABASE_URL": "postgres://kiln@127.0.0.1:5432/kiln"},
        {"KILN_STANDALONE": "0"},
        {"KILN_STANDALONE": "0", "DATABASE_URL": "postgres://kiln@127.0.0.1:5432/kiln"},
    ],
    ids=["database-without-redis", "not-standalone-no-urls", "explicitly-not-standalone"],
)
def test_manage_py_check_refuses_a_configuration_without_redis(env, tmp_path):
    result = run(["manage.py", "check"], {**env, "KILN_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "REDIS_URL is required outside standalone mode" in result.stderr
    assert "audit topic" in result.stderr


def test_every_command_is_refused_not_only_check(tmp_path):
    env = {"DATABASE_URL": "postgres://kiln@127.0.0.1:5432/kiln", "KILN_VAR_DIR": str(tmp_path)}
    result = run(["manage.py", "audit_writer", "--once"], env)
    assert result.returncode != 0 and "REDIS_URL" in result.stderr


@pytest.mark.parametrize(
    ("env", "standalone"),
    [
        ({}, True),
        ({"DATABASE_URL": "postgres://kiln@127.0.0.1:5432/kiln", "KILN_STANDALONE": "1"}, True),
        (
            {
                "DATABASE_URL": "postgres://kiln@127.0.0.1:5432/kiln",
                "REDIS_URL": "redis://127.0.0.1:6379/2",
            },
            False,
        ),
    ],
    ids=["standalone-default", "standalone-with-postgres", "production"],
)
def test_configurations_that_share_a_topic_or_run_standalone_still_load(env, standalone, tmp_path):
    result = run(["-c", f"import django; django.setup(); {SHOW_MODE}"], {**env, "KILN_VAR_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"standalone {standalone}"


@pytest.mark.django_db(transaction=True)
def test_audit_bench_gives_up_when_its_writer_never_chains(settings, tmp_path):
    """The writer cannot take the single-writer lock (this test holds it), so no event is chained:
    the bench fails after --timeout, naming how many events reached the chain."""
    from audit.chain.writer import LOCK_KEY
    from tests.audit.conftest import subprocess_env

    settings.KILN_AUDIT_SIGNING_KEY = str(tmp_path / "audit" / "key.pem")
    settings.KILN_AUDIT_STREAM = f"kiln:audit:test:startup-{os.getpid()}"
    settings.KILN_AUDIT_GROUP = f"startup-{os.getpid()}"
    settings.KILN_AUDIT_ANCHORS = f"dir:{tmp_path / 'anchor'}"
    env = subprocess_env(settings, KILN_VAR_DIR=str(tmp_path))
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
    try:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "manage.py", "audit_bench", "--events", "40", "--recorders", "1",
             "--per-tx", "10", "--timeout", "3", "--json"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        elapsed = time.monotonic() - started
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    assert result.returncode == 1, result.stderr
    assert "0 of 40 recorded events reached the chain" in result.stderr
    assert "after 3 s (--timeout); giving up" in result.stderr
    assert result.stdout.strip() == ""  # no report of a run that did not finish
    assert elapsed < 60


@pytest.mark.django_db(transaction=True)
def test_audit_bench_still_reports_a_run_that_finishes_within_its_timeout(settings, tmp_path):
    from json import loads

    from tests.audit.conftest import subprocess_env, wipe_chain

    settings.KILN_AUDIT_SIGNING_KEY = str(tmp_path / "audit" / "key.pem")
    settings.KILN_AUDIT_ANCHORS = f"dir:{tmp_path / 'anchor'}"
    env = subprocess_env(settings, KILN_VAR_DIR=str(tmp_path))
    try:
        result = subprocess.run(
            [sys.executable, "manage.py", "audit_bench", "--events", "40", "--recorders", "1",
             "--per-tx", "10", "--timeout", "60", "--json"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        wipe_chain()
    assert result.returncode == 0, result.stderr[-2000:]
    report = loads(result.stdout.strip().splitlines()[-1])
    assert report["events"] == 40 and report["verify_ok"] is True
    assert report["chain_length"] >= 40


def test_wait_until_fails_fast_when_the_awaited_process_is_gone():
    from django.core.management.base import CommandError

    from bench.waiting import process_gone, wait_until

    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    started = time.monotonic()
    with pytest.raises(CommandError, match="nothing arrived: the worker exited with status 3"):
        wait_until(lambda: False, timeout=30, what=lambda: "nothing arrived", gone=process_gone(proc, "worker"))
    assert time.monotonic() - started < 5


def test_wait_until_returns_once_done_and_times_out_otherwise():
    from django.core.management.base import CommandError

    from bench.waiting import wait_until

    ticks = iter([False, False, True])
    assert wait_until(lambda: next(ticks), timeout=5, what=lambda: "x", poll=0.001) < 5
    with pytest.raises(CommandError, match=r"2 of 5 rollouts finished after 0.2 s \(--timeout\)"):
        wait_until(lambda: False, timeout=0.2, what=lambda: "2 of 5 rollouts finished", poll=0.01)


@pytest.mark.django_db(transaction=True)
def test_canary_promote_bench_gives_up_after_its_timeout():
    """Rollouts take seconds; with --timeout 0.05 the bench fails naming how many were left."""
    from io import StringIO

    from django.core.management import CommandError, call_command

    from tests.audit.conftest import wipe_chain

    out = StringIO()
    try:
        with pytest.raises(
            CommandError,
            match=r"2 of 2 rollouts were still pending or running .* after 0.05 s \(--timeout\)",
        ):
            call_command(
                "canary_promote_bench", "--rollouts", "2", "--concurrency", "1",
                "--namespaces", "1", "--timeout", "0.05", "--json", stdout=out,
            )  # fmt: skip
    finally:
        wipe_chain()
    assert out.getvalue() == ""  # no report of a run that did not finish
