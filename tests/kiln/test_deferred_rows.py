"""Kiln's PostgreSQL backend defers the audit outbox rows of a transaction to one COPY
(kiln/postgresql/base.py): every later statement of the transaction sees them, a rollback
takes them, a failure to write them fails the transaction whole."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import audit
from audit.models import OutboxEvent
from kiln.identity.models import Team
from kiln.postgresql.base import INSERT_ROWS

pytestmark = pytest.mark.django_db(transaction=True)

OUTBOX = "audit_outboxevent"
COLUMNS = ("event_id", "recorded_at", "actor", "action", "target", "data", "data_jcs", "trace_id")


def _other_connection_count(tag: str) -> int:
    """Outbox rows of `tag` as another session sees them (committed ones only)."""
    params = connection.get_connection_params()
    keep = {k: v for k, v in params.items() if k in ("host", "port", "user", "password", "dbname")}
    with psycopg.connect(**keep, autocommit=True) as other:
        return other.execute(
            "SELECT count(*) FROM audit_outboxevent WHERE target LIKE %s", [f"{tag}:%"]
        ).fetchone()[0]


def _record(tag: str, i: int) -> uuid.UUID:
    return audit.record("tester", "kiln.test.recorded", f"{tag}:{i}", {"i": i})


def test_the_backend_is_kilns_and_rows_wait_for_the_next_statement():
    assert connection.vendor == "postgresql" and hasattr(connection, "defer_row")
    with transaction.atomic():
        ids = [_record("wait", i) for i in range(5)]
        assert connection.deferred_rows() == 5  # nothing sent yet
        # The next statement writes them first, so the transaction reads its own events.
        assert set(OutboxEvent.objects.filter(target__startswith="wait:").values_list(
            "event_id", flat=True)) == set(ids)  # fmt: skip
        assert connection.deferred_rows() == 0
        assert _other_connection_count("wait") == 0  # not committed yet
    assert _other_connection_count("wait") == 5


@pytest.mark.parametrize("events", [1, 2, INSERT_ROWS, INSERT_ROWS + 1, 250])
def test_a_commit_writes_what_no_later_statement_did(events):
    # Up to INSERT_ROWS rows go by one INSERT, more by COPY: both write every row, in order.
    with transaction.atomic():
        ids = [_record("commit", i) for i in range(events)]
    assert connection.deferred_rows() == 0
    assert _other_connection_count("commit") == events
    written = OutboxEvent.objects.filter(target__startswith="commit:").order_by("id")
    assert list(written.values_list("event_id", flat=True)) == ids


def test_a_rolled_back_transaction_writes_none_of_its_rows():
    with pytest.raises(RuntimeError), transaction.atomic():
        _record("rollback", 1)
        raise RuntimeError("the caller fails")
    assert connection.deferred_rows() == 0
    assert _other_connection_count("rollback") == 0
    with transaction.atomic():  # the connection goes on as usual afterwards
        _record("rollback", 2)
    assert _other_connection_count("rollback") == 1


def test_a_savepoint_rollback_takes_the_rows_recorded_inside_it_only():
    with transaction.atomic():
        _record("savepoint", 1)
        with pytest.raises(RuntimeError), transaction.atomic():
            _record("savepoint", 2)
            raise RuntimeError("the inner block fails")
        _record("savepoint", 3)
    targets = set(
        OutboxEvent.objects.filter(target__startswith="savepoint:").values_list("target", flat=True)
    )
    assert targets == {"savepoint:1", "savepoint:3"}


@pytest.mark.parametrize("before", [0, INSERT_ROWS])
def test_a_row_that_cannot_be_written_fails_the_whole_transaction_with_djangos_error(before):
    taken = _record("dup", 0)
    with pytest.raises(IntegrityError), transaction.atomic():
        Team.objects.create(slug="written-with-a-bad-row", name="x")
        for i in range(before):  # with them, the batch goes by COPY
            _record("dup", 100 + i)
        connection.defer_row(
            OUTBOX,
            COLUMNS,
            (taken, datetime.now(UTC), "tester", "kiln.test.recorded", "dup:1", "{}", "{}", ""),
        )
    assert not Team.objects.filter(slug="written-with-a-bad-row").exists()
    assert _other_connection_count("dup") == 1
    assert connection.deferred_rows() == 0


def test_outside_a_transaction_a_row_is_written_at_once():
    connection.defer_row(
        OUTBOX,
        COLUMNS,
        (uuid.uuid4(), datetime.now(UTC), "tester", "kiln.test.recorded", "now:1", "{}", "{}", ""),
    )
    assert connection.deferred_rows() == 0
    assert _other_connection_count("now") == 1


def test_a_row_with_the_wrong_number_of_values_is_refused_before_anything_is_queued():
    with pytest.raises(ValueError, match="2 columns but 1 values"), transaction.atomic():
        connection.defer_row("audit_outboxevent", ("event_id", "actor"), ("x",))
    assert connection.deferred_rows() == 0


# A program: record an event, open a savepoint, leave it (released or rolled back), read the
# outbox; the transaction then commits or rolls back. The model says which events survive.
STEP = st.sampled_from(["record", "record", "record", "open", "release", "undo", "read"])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=st.lists(STEP, max_size=25), commit=st.booleans())
def test_any_mix_of_records_savepoints_and_reads_keeps_exactly_the_surviving_events(
    program, commit
):
    tag = f"prop-{uuid.uuid4().hex[:8]}"
    # Each open savepoint holds the events recorded since it opened (the base level: the
    # transaction's own); closing one hands its events to its parent or drops them.
    levels: list[set[str]] = [set()]
    savepoints: list[str] = []
    n = 0
    try:
        with transaction.atomic():
            for step in program:
                if step == "record":
                    n += 1
                    _record(tag, n)
                    levels[-1].add(f"{tag}:{n}")
                elif step == "open":
                    savepoints.append(transaction.savepoint())
                    levels.append(set())
                elif step in ("release", "undo") and savepoints:
                    sid, inner = savepoints.pop(), levels.pop()
                    if step == "release":
                        transaction.savepoint_commit(sid)
                        levels[-1] |= inner
                    else:
                        transaction.savepoint_rollback(sid)
                elif step == "read":
                    seen = set(
                        OutboxEvent.objects.filter(target__startswith=f"{tag}:").values_list(
                            "target", flat=True
                        )
                    )
                    assert seen == set().union(*levels)
            if not commit:
                raise RuntimeError("roll the transaction back")
    except RuntimeError:
        pass
    expected = set().union(*levels) if commit else set()
    assert _other_connection_count(tag) == len(expected)
    assert connection.deferred_rows() == 0
