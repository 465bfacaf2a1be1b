"""The suite under pytest-xdist: each worker's Redis database, how the runs are shared out, how
the test databases are dropped, and a controlled clock."""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

import psycopg
import pytest
from django.db import connection
from django.utils import timezone
from xdist.scheduler import LoadScopeScheduling

from tests.conftest import (
    BROWSER,
    BROWSER_SECOND,
    LONG_FILES,
    SLOW,
    FilesAndBrowserScheduling,
    pytest_ignore_collect,
    pytest_xdist_setupnodes,
    worker_redis_url,
)


@pytest.mark.parametrize(
    ("url", "index", "dbs", "expected"),
    [
        # The URL's database plus the worker's index: workers 0 and 1 of a run on db 0.
        ("redis://127.0.0.1:6379/0", 0, None, "redis://127.0.0.1:6379/0"),
        ("redis://127.0.0.1:6379/0", 1, None, "redis://127.0.0.1:6379/1"),
        # The slow run of `make test` on db 2: its workers take 2 and 3.
        ("redis://127.0.0.1:6379/2", 1, None, "redis://127.0.0.1:6379/3"),
        # No database in the URL is database 0; a query string is kept.
        ("redis://127.0.0.1:6379", 1, None, "redis://127.0.0.1:6379/1"),
        ("redis://h:6379/4?socket_timeout=5", 1, None, "redis://h:6379/5?socket_timeout=5"),
        # An explicit list (KILN_TEST_REDIS_DBS) picks by index instead.
        ("redis://127.0.0.1:6379/10", 1, "10,13", "redis://127.0.0.1:6379/13"),
    ],
    ids=["first", "second", "slow-second", "no-db", "query", "listed"],
)
def test_each_worker_gets_its_own_redis_database(url, index, dbs, expected):
    assert worker_redis_url(url, index, dbs) == expected


def test_setupnodes_gives_every_worker_spec_a_different_redis_url(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.delenv("KILN_TEST_REDIS_DBS", raising=False)
    specs = [SimpleNamespace(env={}), SimpleNamespace(env={})]
    pytest_xdist_setupnodes(config=None, specs=specs)
    assert [s.env["REDIS_URL"] for s in specs] == [
        "redis://127.0.0.1:6379/0",
        "redis://127.0.0.1:6379/1",
    ]


def test_the_controlled_clock_stands_still_until_advanced(clock):
    start = timezone.now()
    assert timezone.now() == start
    clock.advance(2.5)
    assert (timezone.now() - start).total_seconds() == 2.5


def test_the_slow_run_keeps_the_browser_tests_in_two_units_and_each_other_file_together():
    split = FilesAndBrowserScheduling._split_scope
    assert {
        node: split(None, node)
        for node in (
            "tests/e2e/test_home.py::test_a[desktop]",
            "tests/e2e/test_walk.py::test_b",
            "tests/e2e/test_rollout_dashboard.py::test_c",
            "tests/e2e/test_chaos_detail.py::test_d",
        )
    } == {
        "tests/e2e/test_home.py::test_a[desktop]": "browser-2",
        "tests/e2e/test_walk.py::test_b": "browser-2",
        "tests/e2e/test_rollout_dashboard.py::test_c": "browser",
        "tests/e2e/test_chaos_detail.py::test_d": "browser",
    }
    assert split(None, "tests/kiln/test_db_pool.py::test_d[x::y]") == "tests/kiln/test_db_pool.py"
    assert split(None, "tests/kiln/test_db_pool.py::test_e") == "tests/kiln/test_db_pool.py"


def test_the_browser_unit_and_then_the_long_files_are_handed_out_first():
    scheduling = FilesAndBrowserScheduling.__new__(FilesAndBrowserScheduling)
    # As pytest-xdist leaves the queue: most tests first, so the long four-test file last.
    scheduling.workqueue = OrderedDict(
        (scope, {})
        for scope in (
            "tests/kiln/test_system_actors_enforced.py",
            "browser",
            "tests/portal/test_pages.py",
            "browser-2",
            LONG_FILES[1],
            LONG_FILES[0],
        )
    )
    handed_out: list[str] = []
    with patch.object(
        LoadScopeScheduling,
        "_assign_work_unit",
        lambda self, node: handed_out.append(self.workqueue.popitem(last=False)[0]),
    ):
        while scheduling.workqueue:
            scheduling._assign_work_unit(node=None)
    assert handed_out == [
        "browser",
        "browser-2",
        LONG_FILES[0],
        LONG_FILES[1],
        "tests/kiln/test_system_actors_enforced.py",
        "tests/portal/test_pages.py",
    ]


def test_every_long_file_named_is_a_test_file_of_the_fast_run():
    root = Path(__file__).resolve().parents[2]
    for path in LONG_FILES:
        assert (root / path).is_file(), path
        assert not path.startswith(SLOW), path


def test_every_file_of_the_second_browser_unit_is_a_browser_test_file():
    root = Path(__file__).resolve().parents[2]
    for path in BROWSER_SECOND:
        assert path.startswith(BROWSER) and (root / path).is_file(), path


@pytest.mark.django_db(transaction=True)
def test_a_test_database_is_dropped_at_once_with_a_session_still_on_it():
    creation = connection.creation
    name = f"kiln_drop_probe_{os.getpid()}"
    with creation._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        cursor.execute(f"CREATE DATABASE {name}")
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    lingering = psycopg.connect(**{**params, "dbname": name}, autocommit=True)
    try:
        started = time.monotonic()
        creation._destroy_test_db(name, verbosity=0)
        took = time.monotonic() - started
    finally:
        lingering.close()
        with creation._nodb_cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [name])
            left = cursor.fetchone()[0]
            cursor.execute(f"DROP DATABASE IF EXISTS {name}")
    assert left == 0
    # A plain DROP DATABASE waits five seconds for the other session, then refuses.
    assert took < 3, took


def test_only_the_slow_list_marks_tests_slow():
    # Each run of `make test` leaves the other's files uncollected by path (SLOW), so a test
    # marked slow anywhere else would run in neither.
    tests = Path(__file__).resolve().parents[1]
    marked = [
        path.relative_to(tests.parent).as_posix()
        for path in tests.rglob("test_*.py")
        if "mark.slow" in path.read_text()
    ]
    assert marked == [Path(__file__).relative_to(tests.parent).as_posix()]


@pytest.mark.parametrize(
    ("path", "expr", "ignored"),
    [
        ("tests/e2e", "slow", None),
        ("tests/e2e", "not slow", True),
        ("tests/e2e/test_home.py", "slow", None),
        ("tests/deploy", "slow", True),  # holds no slow file
        ("tests/deploy", "not slow", None),
        ("tests/kiln", "slow", None),
        ("tests/kiln/test_db_pool.py", "slow", None),
        ("tests/kiln/test_db_pool.py", "not slow", True),
        ("tests/kiln/test_params.py", "slow", True),
        ("tests/kiln/test_params.py", "not slow", None),
        ("tests/kiln/test_params.py", "", None),  # a run of everything collects everything
        ("tests/kiln/test_params.py", "e2e", None),
        ("tests/kiln/standalone_process.py", "slow", None),  # not a test file
    ],
)
def test_each_run_collects_only_its_own_files(path, expr, ignored):
    root = Path(__file__).resolve().parents[2]
    config = SimpleNamespace(rootpath=root, option=SimpleNamespace(markexpr=expr))
    assert pytest_ignore_collect(root / path, config) is ignored
