"""The database itself keeps the chain append-only: triggers on PostgreSQL and SQLite, roles on PostgreSQL."""

from __future__ import annotations

# ruff: noqa: S608 - SQL built from module constants
import sqlite3
import uuid

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.db.utils import DatabaseError

from audit import chain, record, services, triggers
from audit.models import ChainEvent
from tests.audit.conftest import drain

pytestmark = pytest.mark.django_db

COLUMNS = "seq, event_id, recorded_at, actor, action, target, data, trace_id, prev_hash, hash"


def _chain_three() -> list[ChainEvent]:
    for i in range(3):
        record("alice", "portal.environment.approved", f"env:{i}", {"i": i})
    drain()
    return list(ChainEvent.objects.order_by("seq"))


def _next_entry(seq: int, prev: str) -> chain.Entry:
    return next(
        chain.build_entries(
            seq - 1,
            prev,
            [(str(uuid.uuid4()), "2026-01-01T00:00:00.000000Z", "mallory", "x.y.z", "t", "{}", "")],
        )
    )


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_chainevent SET actor = 'mallory' WHERE seq = 2",
        "DELETE FROM audit_chainevent WHERE seq = 3",
        "TRUNCATE audit_chainevent",
    ],
    ids=["update", "delete", "truncate"],
)
def test_changing_chain_rows_is_rejected_by_the_database(sql):
    rows = _chain_three()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql)
    assert list(ChainEvent.objects.order_by("seq")) == rows
    assert ChainEvent.objects.get(seq=2).actor == "alice"


def _insert(entry: chain.Entry) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO audit_chainevent ({COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            list(entry.as_row()),
        )


@pytest.mark.parametrize(
    ("seq_offset", "prev_from"),
    [(2, "head"), (0, "head"), (1, "genesis")],
    ids=["seq-skips-ahead", "seq-reused", "prev-hash-not-head"],
)
def test_insert_that_does_not_extend_the_head_is_rejected(seq_offset, prev_from):
    rows = _chain_three()
    prev = rows[-1].hash if prev_from == "head" else chain.GENESIS_HASH
    entry = _next_entry(rows[-1].seq + seq_offset, prev)
    with pytest.raises(DatabaseError), transaction.atomic():
        _insert(entry)
    assert ChainEvent.objects.count() == 3


def test_insert_that_extends_the_head_is_accepted():
    rows = _chain_three()
    _insert(_next_entry(4, rows[-1].hash))
    assert ChainEvent.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_application_role_can_read_but_not_insert_and_writer_role_can(committed_chain):
    rows = _chain_three()
    call_command("audit_setup_roles")
    db = connection.settings_dict
    dsn = {"host": db["HOST"], "port": db["PORT"] or 5432, "dbname": db["NAME"]}
    entry = _next_entry(4, rows[-1].hash)
    with psycopg.connect(user=settings.KILN_AUDIT_APP_ROLE, **dsn) as app:
        assert app.execute("SELECT count(*) FROM audit_chainevent").fetchone()[0] == 3
        # The web process stores witness cosignatures, and never changes one.
        may = "SELECT has_table_privilege('audit_cosignature', %s)"
        assert app.execute(may, ["INSERT"]).fetchone()[0]
        assert not app.execute(may, ["UPDATE"]).fetchone()[0]
        assert not app.execute(may, ["DELETE"]).fetchone()[0]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.execute(
                f"INSERT INTO audit_chainevent ({COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                list(entry.as_row()),
            )
    with psycopg.connect(user=settings.KILN_AUDIT_WRITER_ROLE, **dsn) as writer:
        writer.execute(
            f"INSERT INTO audit_chainevent ({COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            list(entry.as_row()),
        )
        writer.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            writer.execute("DELETE FROM audit_chainevent WHERE seq = 4")
    assert ChainEvent.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_the_writer_role_ends_with_the_append_inside_a_longer_transaction(committed_chain):
    """The append runs as the writer role; work after it in the same transaction (the fault
    drills' pause, a checkpoint) runs as the connection's own user again."""
    _chain_three()
    call_command("audit_setup_roles")
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        me = cursor.fetchone()[0]
        with transaction.atomic():
            services.chain_append(messages=[], role=settings.KILN_AUDIT_WRITER_ROLE)
            cursor.execute("SELECT current_user")
            assert cursor.fetchone()[0] == me
            services.checkpoint_create()  # the writer role may not insert checkpoints


def test_sqlite_triggers_enforce_the_same_rules():
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE TABLE audit_chainevent (seq integer primary key, event_id text, recorded_at text,"
        " actor text, action text, target text, data text, trace_id text, prev_hash text, hash text)"
    )
    for sql in triggers.statements("sqlite", create=True):
        db.execute(sql)
    entries = list(
        chain.build_entries(
            0,
            chain.GENESIS_HASH,
            [(str(uuid.uuid4()), "2026-01-01T00:00:00.000000Z", "a", "x.y.z", "t", "{}", "")] * 3,
        )
    )
    insert = f"INSERT INTO audit_chainevent ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)"
    db.execute(insert, entries[0].as_row())
    with pytest.raises(sqlite3.IntegrityError, match="seq does not extend"):
        db.execute(insert, entries[2].as_row())
    forged = chain.Entry(*entries[1].as_row()[:8], "f" * 64, entries[1].hash)
    with pytest.raises(sqlite3.IntegrityError, match="prev_hash"):
        db.execute(insert, forged.as_row())
    db.execute(insert, entries[1].as_row())
    for sql in ("UPDATE audit_chainevent SET actor = 'm'", "DELETE FROM audit_chainevent"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(sql)
    assert db.execute("SELECT count(*), min(actor) FROM audit_chainevent").fetchone() == (2, "a")


def test_a_database_without_chain_triggers_is_refused_at_migration_time():
    from django.core.exceptions import ImproperlyConfigured

    from audit.triggers import statements

    with pytest.raises(ImproperlyConfigured, match="mysql is not supported"):
        statements("mysql", create=True)
