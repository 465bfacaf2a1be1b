"""The suite under pytest-xdist: each worker's Redis database, how the slow run is shared out,
and a controlled clock."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.utils import timezone

from tests.conftest import (
    FilesAndBrowserScheduling,
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


def test_the_slow_run_keeps_every_browser_test_on_one_worker_and_each_other_file_together():
    split = FilesAndBrowserScheduling._split_scope
    scopes = {
        split(None, node)
        for node in (
            "tests/e2e/test_home.py::test_a[desktop]",
            "tests/e2e/test_walk.py::test_b",
            "tests/e2e/test_rollout_dashboard.py::test_c",
        )
    }
    assert scopes == {"browser"}
    assert split(None, "tests/kiln/test_db_pool.py::test_d[x::y]") == "tests/kiln/test_db_pool.py"
    assert split(None, "tests/kiln/test_db_pool.py::test_e") == "tests/kiln/test_db_pool.py"
