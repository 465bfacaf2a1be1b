"""The web's PostgreSQL connections stay within its pool under concurrent HTTP load, and a pool
that stays exhausted answers 503 with its reason, not 500 (kiln/settings/core.py, kiln/dbpool.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.db import OperationalError, connection
from django.test import RequestFactory
from psycopg_pool import PoolTimeout

from kiln.dbpool import reset_connection
from kiln.identity.models import Team
from kiln.views import server_error
from tests.audit.conftest import subprocess_env
from tests.kiln.standalone_process import free_port
from tests.support.shape import Shape

POOL_MAX = 4
APP_NAME = "kiln-pool-test-web"


def _get(url: str, token: str) -> int:
    request = urllib.request.Request(  # noqa: S310 - loopback
        url, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_stay_within_the_pool_and_never_500(settings, make_token, tmp_path):
    Team.objects.create(slug="payments", name="Payments")
    token = make_token(sub="alice", roles=["engineer"], team="payments")
    db = connection.settings_dict
    environment = subprocess_env(
        settings,
        KILN_JWT_JWKS=settings.KILN_JWT_JWKS,
        KILN_JWT_ISSUER=settings.KILN_JWT_ISSUER,
        KILN_JWT_AUDIENCE=settings.KILN_JWT_AUDIENCE,
        KILN_TRACING="0",
        KILN_DB_POOL_MAX=str(POOL_MAX),
        KILN_DB_POOL_TIMEOUT="30",
        PGAPPNAME=APP_NAME,  # libpq names the web's backends: pg_stat_activity counts them
    )
    # One web process: the pool, and the bound, are per process.
    shape = Shape(
        port=free_port(), environment=environment, workdir=tmp_path, names=("web",),
        web_processes=1,
    )  # fmt: skip
    peak, stop = [0], threading.Event()

    def sample() -> None:
        dsn = f"host={db['HOST']} port={db['PORT'] or 5432} user={db['USER']} dbname={db['NAME']}"
        with psycopg.connect(dsn, autocommit=True) as sampler:
            while not stop.is_set():
                count = sampler.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                    " AND application_name = %s",
                    [db["NAME"], APP_NAME],
                ).fetchone()[0]
                peak[0] = max(peak[0], count)
                time.sleep(0.02)

    try:
        shape.start_all(timeout=90)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        urls = [shape.base_url + "/readyz", shape.base_url + "/api/v1/environments/"] * 60
        with ThreadPoolExecutor(max_workers=100) as pool:
            statuses = list(pool.map(lambda url: _get(url, token), urls))
        stop.set()
        sampler.join(timeout=5)
    finally:
        stop.set()
        shape.stop_all()
    assert 500 not in statuses, statuses
    assert statuses.count(200) == len(urls), statuses
    assert 0 < peak[0] <= POOL_MAX, peak[0]


def test_an_exhausted_pool_answers_503_with_its_reason():
    request = RequestFactory().get("/api/v1/environments/", HTTP_ACCEPT="application/json")
    try:
        try:
            raise PoolTimeout("couldn't get a connection after 5.00 sec")
        except PoolTimeout as exc:
            raise OperationalError(str(exc)) from exc
    except OperationalError:
        response = server_error(request)
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert b"database_busy" in response.content and b"KILN_DB_POOL_TIMEOUT" in response.content
    try:
        raise OperationalError("connection refused")
    except OperationalError:
        assert server_error(request).status_code == 500


@pytest.mark.django_db
def test_every_connection_plans_with_the_configured_random_page_cost():
    """KILN_DB_RANDOM_PAGE_COST reaches PostgreSQL as a libpq option on every connection."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW random_page_cost")
        assert cursor.fetchone()[0] == "1.1"


def test_a_random_page_cost_that_is_not_positive_is_refused():
    environment = {
        **os.environ,
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
        "SECRET_KEY": "t",
        "KILN_DB_RANDOM_PAGE_COST": "0",
        "DJANGO_SETTINGS_MODULE": "kiln.settings",
    }
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", "import django; django.setup()"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "KILN_DB_RANDOM_PAGE_COST must be a positive number" in result.stderr


@pytest.mark.django_db
def test_a_connection_comes_back_to_the_pool_without_its_role_or_advisory_locks():
    """`reset_connection` undoes what a borrower set: its role and its session advisory locks
    (a lock left held would block every later borrower of the same key)."""
    dsn = connection.get_connection_params()
    params = {k: v for k, v in dsn.items() if k in ("host", "port", "user", "password", "dbname")}
    with psycopg.connect(**params, autocommit=True) as borrowed:
        borrowed.execute("SET ROLE pg_read_all_stats")
        borrowed.execute("SELECT pg_advisory_lock(424242)")
        with psycopg.connect(**params, autocommit=True) as other:
            assert other.execute("SELECT pg_try_advisory_lock(424242)").fetchone()[0] is False
            reset_connection(borrowed)
            assert borrowed.execute("SELECT current_user = session_user").fetchone()[0] is True
            assert other.execute("SELECT pg_try_advisory_lock(424242)").fetchone()[0] is True
