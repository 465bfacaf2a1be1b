"""Audit fixtures: a unique stream and signing key per test, helpers to run the chain end to end."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from audit import record


@pytest.fixture(autouse=True)
def audit_settings(settings, tmp_path: Path):
    """Each test gets its own stream, group, signing key and anchors, so runs never collide."""
    tag = uuid.uuid4().hex[:10]
    settings.KILN_AUDIT_STREAM = f"kiln:audit:test:{tag}"
    settings.KILN_AUDIT_GROUP = f"writers-{tag}"
    settings.KILN_AUDIT_SIGNING_KEY = str(tmp_path / "audit" / "checkpoint-key.pem")
    settings.KILN_AUDIT_SIGNING_KEY_IS_DEV = True
    settings.KILN_AUDIT_ANCHORS = f"dir:{tmp_path / 'anchor'}"
    settings.KILN_AUDIT_RELAY_ON_COMMIT = False
    yield settings
    if django_settings.REDIS_URL:
        client = redis.Redis.from_url(django_settings.REDIS_URL)
        client.delete(f"kiln:audit:test:{tag}")
        client.close()


def wipe_chain() -> None:
    """Empty the chain, its Merkle tiles and the witness cosignatures behind the triggers' back
    (teardown of committed data)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for table in ("audit_chainevent", "audit_merkletile", "audit_cosignature"):
                cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
                cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names
                cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")


@pytest.fixture
def committed_chain(transactional_db):
    """For transaction=True tests: empty the chain afterwards so the database flush succeeds."""
    yield
    wipe_chain()


@pytest.fixture
def log300():
    """300 chained entries with checkpoints signed at sizes 100, 200 and 300."""
    for i in range(300):
        record("alice", "portal.environment.approved", f"env:{i}", {"i": i})
        if i in (99, 199):
            drain()
    drain()


def drain() -> dict:
    """Publish the outbox and chain everything pending, as `audit_writer --once` does."""
    from audit.chain.writer import AuditWriter

    return AuditWriter(block_ms=0).run_once().__dict__


@pytest.fixture
def tamper():
    """Run raw SQL on the chain with its triggers disabled, as a superuser tamperer would."""

    def _run(*statements: tuple[str, list] | str) -> None:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE audit_chainevent DISABLE TRIGGER USER")
            try:
                for stmt in statements:
                    sql, params = (stmt, []) if isinstance(stmt, str) else stmt
                    cursor.execute(sql, params)
            finally:
                cursor.execute("ALTER TABLE audit_chainevent ENABLE TRIGGER USER")

    return _run


def subprocess_env(settings, **extra: str) -> dict[str, str]:
    """The environment for a Kiln process run by a test: the test's database, Redis, audit stream,
    group, signing key and anchors."""
    from audit.services import signing_key

    signing_key()  # the subprocess is configured with an explicit key: create it first
    db = connection.settings_dict
    return {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": "t",
        "KILN_AUDIT_STREAM": settings.KILN_AUDIT_STREAM,
        "KILN_AUDIT_GROUP": settings.KILN_AUDIT_GROUP,
        "KILN_AUDIT_SIGNING_KEY": settings.KILN_AUDIT_SIGNING_KEY,
        "KILN_AUDIT_ANCHORS": settings.KILN_AUDIT_ANCHORS,
        **extra,
    }
