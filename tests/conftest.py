"""Suite-wide fixtures: RSA keys and a JWKS for tokens, API clients per role."""

from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db.backends.postgresql.creation import DatabaseCreation
from django.db.backends.postgresql.operations import DatabaseOperations
from django.utils import timezone
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient
from whitenoise.middleware import WhiteNoiseMiddleware
from xdist.scheduler import LoadScopeScheduling

from kiln import observability
from kiln.identity import keys, tokens

ROOT = Path(__file__).resolve().parents[1]

# Tests that mostly wait (browsers, real server and worker processes, faults, fuzzing): marked
# `slow`. `make test` runs them in a pytest run of their own, beside the rest, on their own
# test database and Redis database (Makefile); `pytest` alone runs everything.
SLOW = (
    "tests/e2e/",
    "tests/canary/test_stream_http.py",
    "tests/canary/test_promote_bench.py",
    "tests/canary/test_prometheus_live.py",
    "tests/canary/test_dev_traffic_live.py",
    "tests/chaos/test_loadtest.py",
    "tests/kiln/test_task_recovery.py",
    "tests/kiln/test_standalone.py",
    "tests/kiln/test_standalone_tracing.py",
    "tests/kiln/test_login_throttle_http.py",
    "tests/kiln/test_attacks_http.py",
    "tests/kiln/test_startup_config.py",
    "tests/kiln/test_worker_db.py",
    "tests/kiln/test_db_pool.py",
    "tests/kiln/test_web_graceful_shutdown.py",
    "tests/portal/test_fault_matrix.py",
    "tests/portal/test_provision_bench.py",
    "tests/portal/test_web_bench.py",
    "tests/portal/test_tracing_processes.py",
    "tests/audit/test_tlog_bench.py",
    "tests/scheduler/test_replay_pool.py",
    "tests/kiln/test_upgrade.py",
    "tests/bench/test_scheduler_bench.py",
    "tests/bench/test_product_apps.py",
    # A real Prometheus scraping (started, waited for, paused and stopped per test), a stream
    # outliving a token, a connection outliving a pause, a broker restarted, controllers killed.
    "tests/canary/test_prometheus_windows.py",
    "tests/canary/test_prometheus_source.py",
    "tests/canary/test_prometheus_bench.py",
    "tests/chaos/test_chaos_stop_sources.py",
    "tests/chaos/test_chaos_crash.py",
    "tests/chaos/test_chaos_split_brain.py",
    "tests/canary/test_stream_access.py",
    "tests/kiln/test_web_keep_alive.py",
    "tests/kiln/test_requeue_through_broker_restart.py",
)


# Property tests check what a function answers, not how fast: with the whole suite on two cores
# a case can take longer than Hypothesis's 200 ms deadline once and not when replayed, which it
# reports as a flaky failure, and drawing examples can pass its too_slow health check's bound.
# Tests that need a bound on time measure it themselves.
hypothesis_settings.register_profile(
    "kiln", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("kiln")


def worker_redis_url(url: str, index: int, dbs: str | None = None) -> str:
    """The Redis URL for parallel worker `index`: database `dbs[index]` if a comma list is given
    (KILN_TEST_REDIS_DBS), else the URL's own database plus the index."""
    parts = urlsplit(url)
    chosen = [int(d) for d in dbs.split(",")] if dbs else None
    number = chosen[index] if chosen else int(parts.path.strip("/") or 0) + index
    return urlunsplit(parts._replace(path=f"/{number}"))


def worker_var_dir(database_url: str | None, index: int) -> Path:
    """The var/ directory of parallel worker `index`: var/test-workers/<database>-gw<index>, so
    the fast and the slow run of `make test` (kiln and kiln_slow) never share one either."""
    database = urlsplit(database_url or "").path.strip("/") or "kiln"
    base = Path(os.environ.get("KILN_VAR_DIR") or ROOT / "var")
    return base / "test-workers" / f"{database}-gw{index}"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs) -> None:
    """Under pytest-xdist each worker gets a Redis database of its own (its test database is
    suffixed by pytest-django): the Celery broker, the channel layer, the cache and the change
    hub would otherwise be shared between tests running at once. Each also gets an empty var/
    directory of its own: the audit anchor files, the checkpoint signing key and the GitOps
    repository live there by default, and workers writing one at once trip over each other.
    Set before the worker starts, so the settings read them as any process's environment."""
    url = os.environ.get("REDIS_URL")
    for index, spec in enumerate(specs):
        if url:
            dbs = os.environ.get("KILN_TEST_REDIS_DBS")
            spec.env["REDIS_URL"] = worker_redis_url(url, index, dbs)
        var_dir = worker_var_dir(os.environ.get("DATABASE_URL"), index)
        shutil.rmtree(var_dir, ignore_errors=True)
        var_dir.mkdir(parents=True)
        spec.env["KILN_VAR_DIR"] = str(var_dir)


# The browser tests: under `--dist loadgroup` (both runs of `make test`) they go first, as two
# units of about equal length, each on one worker with one standalone server for its tests (one
# unit was the slow run's critical path); every other file is a unit of its own, as under
# `--dist loadfile`.
BROWSER = "tests/e2e/"
BROWSER_SECOND = (  # the second browser unit: about half of the browser tests' time
    "tests/e2e/test_walk.py",
    "tests/e2e/test_narrow_screens.py",
    "tests/e2e/test_live_lists.py",
    "tests/e2e/test_home.py",
    "tests/e2e/test_phone_width.py",
)
BROWSER_UNITS = ("browser", "browser-2")
# Files of few tests that take long (bench/results/suite_profile-fast-before-2026-12-06.json):
# handed out right after the browser tests. pytest-xdist orders files by their number of tests,
# which put the API fuzzing's four tests (over a minute) last, on one worker, the other idle.
LONG_FILES = (
    "tests/kiln/test_schemathesis.py",
    "tests/kiln/test_bad_input.py",
    "tests/cluster/test_contract.py",
    "tests/audit/test_fast_reads.py",
    "tests/audit/test_writer.py",
    "tests/scheduler/test_replay.py",
    "tests/portal/test_sleep.py",
    "tests/kiln/test_unauthenticated_fuzz.py",
    "tests/kiln/test_visibility_property.py",
    "tests/deploy/test_rbac_proof.py",
)


class FilesAndBrowserScheduling(LoadScopeScheduling):
    """pytest-xdist's `loadfile` distribution, except that the browser tests are two units
    (BROWSER_UNITS), and those and then LONG_FILES are handed out first. (Its own `xdist_group`
    markers do not group under pytest 9, whose node ids it cannot rename.)"""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        if not path.startswith(BROWSER):
            return path
        return BROWSER_UNITS[1] if path in BROWSER_SECOND else BROWSER_UNITS[0]

    @staticmethod
    def _rank(scope: str) -> int:
        if scope in BROWSER_UNITS:
            return 0
        return 1 + LONG_FILES.index(scope) if scope in LONG_FILES else 1 + len(LONG_FILES)

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:  # the queue is whole before the first unit is handed out
            for scope in sorted(self.workqueue, key=self._rank):
                self.workqueue.move_to_end(scope)
            self._ordered = True
        super()._assign_work_unit(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` distributes as `FilesAndBrowserScheduling`; the others as pytest-xdist does."""
    if config.getvalue("dist") == "loadgroup":
        return FilesAndBrowserScheduling(config, log)
    return None


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """`-m slow` and `-m "not slow"` (the two runs of `make test`) leave the other run's files
    uncollected, not only deselected: every worker imports what it collects, and the slow
    run's three workers importing the whole suite cost more than the tests they then ran.
    SLOW alone says which files are slow (tests/kiln/test_parallel_workers.py holds that)."""
    expr = config.option.markexpr
    if expr not in ("slow", "not slow"):
        return None
    try:
        path = collection_path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return None
    if path == ".":
        return None
    if collection_path.is_dir():
        inside = f"{path}/"
        if expr == "slow":  # a folder that neither holds nor lies inside a slow entry
            holds = any(entry.startswith(inside) or inside.startswith(entry) for entry in SLOW)
            return None if holds else True
        return True if inside in SLOW else None
    if not collection_path.name.startswith("test_"):
        return None
    slow = path.startswith(SLOW)
    return True if slow == (expr == "not slow") else None


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    root = Path(str(config.rootpath))
    for item in items:
        path = Path(str(item.path)).relative_to(root).as_posix()
        if path.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
    result = yield
    # After pytest-django's own order (database tests first): the browser tests, which use no
    # test database, first of all, so the longest group is not the last one handed out.
    items.sort(key=lambda item: not str(item.path).startswith(str(root / BROWSER)))
    return result


class Clock:
    """A controlled clock: `django.utils.timezone.now()` stands still until the test advances it,
    so a test waits out a simulated delay (readiness, finalizers, step timeouts) exactly, without
    sleeping and whatever the machine's pace."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.current = timezone.now()
        monkeypatch.setattr(timezone, "now", lambda: self.current)

    def advance(self, seconds: float) -> None:
        """Move the time every later `timezone.now()` returns forward by `seconds`."""
        self.current += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """A controlled clock for the test: `clock.advance(seconds)` instead of `time.sleep`."""
    return Clock(monkeypatch)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Hash test passwords cheaply: the real hasher's cost (a third of a second a password, by
    design) buys nothing in a test and was the most expensive thing some tests did."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session", autouse=True)
def _static_files_listed_once():
    """WhiteNoise lists and stats every static file when its middleware is built: once in a
    served process, but once per test client in tests (each builds its handler), a tenth of a
    second each. Tests reuse the first listing made for the same prefix and headers."""
    original = WhiteNoiseMiddleware.add_files_from_finders
    listings: dict[tuple, dict] = {}

    def add_files_from_finders(self) -> None:
        key = (self.static_prefix, self.max_age, self.allow_all_origins, self.charset)
        if key not in listings:
            before = dict(self.files)
            original(self)
            listings[key] = {url: f for url, f in self.files.items() if before.get(url) is not f}
        self.files.update(listings[key])

    WhiteNoiseMiddleware.add_files_from_finders = add_files_from_finders
    yield
    WhiteNoiseMiddleware.add_files_from_finders = original


# What a flush between transactional tests leaves in place: the content types and permissions
# migrate wrote for every model, which the post_migrate after a flush would write again.
KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission"})


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete():
    """After a transactional test Django empties the database with one TRUNCATE of every table,
    a fixed cost however little the test wrote (PostgreSQL gives each table a new file). A
    DELETE of the few rows a test leaves costs what they are, in any order: Django's foreign
    keys are checked at the commit. The audit tables' triggers refuse a DELETE of any row as they refuse
    a TRUNCATE of a non-empty table, so a test that leaves a chain behind still fails."""
    original = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:
            return original(self, style, tables, reset_sequences=True, allow_cascade=allow_cascade)
        emptied = [table for table in tables if table not in KEPT_BY_FLUSH]
        deletes = [f"DELETE FROM {self.quote_name(table)}" for table in emptied]  # noqa: S608
        return ["SET CONSTRAINTS ALL DEFERRED", *deletes]

    DatabaseOperations.sql_flush = sql_flush
    yield
    DatabaseOperations.sql_flush = original


@pytest.fixture(scope="session", autouse=True)
def _test_databases_dropped_at_once():
    """Drop each test database WITH (FORCE) after the last test, ending the sessions still on it.
    A connection that some test's thread holds outlives the test (a fast-read thread keeps
    its pooled connection between reads); a plain DROP DATABASE then waits five seconds for
    it, is refused, and leaves the database behind, so every run ended five seconds late."""

    def _destroy_test_db(self, test_database_name, verbosity):
        self.connection.close_pool()
        with self._nodb_cursor() as cursor:
            name = self.connection.ops.quote_name(test_database_name)
            cursor.execute(f"DROP DATABASE {name} WITH (FORCE)")

    DatabaseCreation._destroy_test_db = _destroy_test_db
    yield
    # Left in place: pytest-django drops the databases after every session fixture is done.


@pytest.fixture(scope="session", autouse=True)
def _spans_in_memory() -> None:
    """Tests read finished spans from the in-memory exporter: the request, task and Kiln spans.
    Not a span per SQL statement and Redis command: no test reads them, and making them cost
    about 5 % of the portal tests' CPU (docs/operations.md). A test of their own makes and reads
    them (tests/kiln/test_observability.py)."""
    observability.keep_spans_in_memory()


@pytest.fixture(autouse=True)
def _spans_cleared():
    """Each test's spans are dropped after it, so the exporter does not grow through the run."""
    yield
    observability.memory_exporter.clear()


@pytest.fixture(scope="session")
def jwt_keys(tmp_path_factory) -> dict:
    """A fresh RSA key pair and JWKS file for the whole session."""
    key_dir: Path = tmp_path_factory.mktemp("jwt")
    private_path, jwks_path = keys.generate_key_pair(key_dir, kid="test-key-1")
    return {
        "private_key": keys.load_private_key(private_path),
        "private_path": private_path,
        "jwks_path": jwks_path,
        "jwks": json.loads(jwks_path.read_text()),
        "kid": "test-key-1",
    }


@pytest.fixture(autouse=True)
def _jwt_settings(settings, jwt_keys):
    """Point the API at the test JWKS for every test."""
    settings.KILN_JWT_JWKS = str(jwt_keys["jwks_path"])
    settings.KILN_JWT_JWKS_IS_DEV = False
    settings.KILN_JWT_PRIVATE_KEY = str(jwt_keys["private_path"])
    settings.KILN_JWT_KID = jwt_keys["kid"]
    settings.KILN_JWT_ISSUER = "https://kiln.test"
    settings.KILN_JWT_AUDIENCE = "kiln-test"
    settings.KILN_JWT_LEEWAY_SECONDS = 10


@pytest.fixture
def make_token(jwt_keys):
    """make_token(sub="alice", roles=["engineer"], team="payments", ttl_seconds=3600) -> str"""

    def _make(
        sub: str = "alice",
        roles=("engineer",),
        team: str | None = None,
        ttl_seconds: int = 3600,
        **kw,
    ):
        return tokens.issue(
            private_key=jwt_keys["private_key"],
            kid=jwt_keys["kid"],
            issuer=kw.pop("issuer", "https://kiln.test"),
            audience=kw.pop("audience", "kiln-test"),
            sub=sub,
            roles=list(roles),
            team=team,
            ttl_seconds=ttl_seconds,
            now=kw.pop("now", None),
        )

    return _make


@pytest.fixture
def api_client_for(make_token):
    """api_client_for("approver", sub="carol", team="payments") -> an APIClient with a bearer token."""

    def _client(*roles: str, sub: str = "user", team: str | None = None) -> APIClient:
        client = APIClient()
        client.credentials(
            HTTP_AUTHORIZATION=f"Bearer {make_token(sub=sub, roles=roles, team=team)}"
        )
        return client

    return _client
