"""Recording: the outbox row lives and dies with the caller's transaction; relay and writer chain it."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from audit import record
from audit.chain.topic import TopicUnavailable
from audit.models import ChainEvent, OutboxEvent
from audit.services import relay_publish
from kiln.errors import InvalidInput
from kiln.identity.permissions import system_actor
from tests.audit.conftest import drain

pytestmark = pytest.mark.django_db


class Boom(Exception):
    pass


def test_rolled_back_transaction_leaves_no_audit_event():
    with pytest.raises(Boom), transaction.atomic():
        record("alice", "portal.environment.approved", "env:1", {"n": 1})
        assert OutboxEvent.objects.count() == 1
        raise Boom
    assert OutboxEvent.objects.count() == 0
    drain()
    assert ChainEvent.objects.count() == 0


def test_recorded_event_is_chained_with_its_fields_and_leaves_the_outbox():
    event_id = record(system_actor("reaper"), "portal.environment.expired", "env:9", {"ttl": 3600})
    stats = drain()
    row = ChainEvent.objects.get()
    assert stats["appended"] == 1 and stats["checkpoints"] == 1
    assert (row.seq, row.event_id, row.actor, row.action, row.target) == (
        1,
        event_id,
        "system:reaper",
        "portal.environment.expired",
        "env:9",
    )
    assert json.loads(row.data) == {"ttl": 3600}
    assert row.prev_hash == "0" * 64 and len(row.hash) == 64
    assert OutboxEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("action", "data"),
    [
        ("approved", {}),
        ("Portal.Env.Approved", {}),
        ("portal.environment.approved", {"x": float("nan")}),
        ("portal.environment.approved", {"big": 2**60}),
        ("portal.environment.approved", {"obj": object()}),
    ],
    ids=["not-dotted", "upper-case", "nan", "int-beyond-2^53", "not-json"],
)
def test_bad_action_or_data_is_refused_and_records_nothing(action, data):
    with pytest.raises(InvalidInput):
        record("alice", action, "env:1", data)
    assert OutboxEvent.objects.count() == 0


def test_no_actor_is_refused():
    with pytest.raises(InvalidInput):
        record(None, "portal.environment.approved", "env:1")
    assert OutboxEvent.objects.count() == 0


def test_events_recorded_while_redis_is_down_are_published_later(settings):
    good_url = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    ids = [record("alice", "portal.environment.approved", f"env:{i}", {"i": i}) for i in range(5)]
    with pytest.raises(TopicUnavailable):
        relay_publish()
    assert OutboxEvent.objects.filter(published_at__isnull=True).count() == 5
    settings.REDIS_URL = good_url  # Redis is back
    assert relay_publish() == 5
    drain()
    assert list(ChainEvent.objects.values_list("event_id", flat=True)) == ids
    assert OutboxEvent.objects.count() == 0


def test_published_but_lost_events_are_republished_after_the_grace_period(settings):
    record("alice", "portal.environment.approved", "env:1")
    assert relay_publish() == 1
    # The stream is lost (Redis restarted without persistence) before the writer read it.
    import redis

    redis.Redis.from_url(settings.REDIS_URL).delete(settings.KILN_AUDIT_STREAM)
    assert relay_publish() == 0  # still within the grace period
    settings.KILN_AUDIT_REPUBLISH_SECONDS = 0
    drain()
    assert ChainEvent.objects.count() == 1


def test_awkward_text_survives_chaining_and_the_row_reader():
    from django.db import transaction as tx

    from audit.chain.verification import iter_rows, verify_chain

    record(
        'a,"b"\nc\\d',
        "portal.environment.approved",
        "tab\there ünïcødé 😀",
        {"s": 'x\n"y"\u0001', "n": [1, 2.5]},
    )
    record("plain", "portal.environment.approved", "env:2")
    drain()
    with tx.atomic():
        rows = [r for chunk in iter_rows() for r in chunk]
    stored = ChainEvent.objects.order_by("seq").values_list("actor", "target", "data")
    assert [(r[3], r[5], r[6]) for r in rows] == list(stored) and rows[0][3] == 'a,"b"\nc\\d'
    assert rows[0][2].endswith("Z") and len(rows[0][2]) == len("2026-01-01T00:00:00.000000Z")
    report = verify_chain()
    assert report.ok and report.checked == 2, report.message


def test_republish_all_publishes_every_unchained_row_once(settings):
    for i in range(3):
        record("alice", "portal.environment.approved", f"env:{i}")
    assert relay_publish() == 3
    assert relay_publish() == 0
    assert relay_publish(republish_all=True) == 3  # e.g. an in-process stream lost with its process
    stats = drain()
    assert (stats["appended"], stats["duplicates"]) == (3, 3)


def test_seed_creates_the_dev_signing_key_once(settings):
    from pathlib import Path

    from audit.seed import seed_demo

    assert not Path(settings.KILN_AUDIT_SIGNING_KEY).exists()
    made = seed_demo()
    assert len(made) == 1 and Path(settings.KILN_AUDIT_SIGNING_KEY).exists()
    assert (
        (Path(settings.KILN_AUDIT_SIGNING_KEY).with_suffix(".pub"))
        .read_text()
        .startswith("kiln.local/audit+")
    )
    assert seed_demo() == []


def test_the_relay_sweep_is_scheduled_and_the_task_relays(settings):
    from audit.tasks import relay_outbox
    from kiln.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["audit-relay-sweep"]
    app.loader.import_default_modules()
    assert entry["task"] in app.tasks and entry["schedule"] == settings.KILN_AUDIT_SWEEP_SECONDS
    record("alice", "portal.environment.approved", "env:1")
    assert relay_outbox.apply().get() == 1  # run as the worker would
    assert OutboxEvent.objects.get().published_at is not None


def _relay_hooks() -> int:
    from django.db import connection

    from audit.chain.relay import wake

    return sum(1 for item in connection.run_on_commit if item[1] is wake)


def test_one_relay_wake_up_per_transaction_and_again_after_a_savepoint_rollback():
    with transaction.atomic():
        with pytest.raises(Boom), transaction.atomic():
            record("alice", "portal.environment.approved", "env:gone", {})
            assert _relay_hooks() == 1
            raise Boom
        assert _relay_hooks() == 0  # went with the savepoint
        record("alice", "portal.environment.approved", "env:kept", {})
        record("alice", "portal.environment.approved", "env:kept2", {})
        assert _relay_hooks() == 1
        for i in range(5):
            record("alice", "portal.environment.approved", f"env:{i}", {"i": i})
        assert _relay_hooks() == 1
    assert sorted(OutboxEvent.objects.values_list("target", flat=True)) == sorted(
        [f"env:{i}" for i in range(5)] + ["env:kept", "env:kept2"]
    )


def test_dates_decimals_uuids_and_floats_take_the_general_path_to_the_same_canonical_text():
    import uuid
    from datetime import UTC, datetime
    from decimal import Decimal

    when, ident = datetime(2026, 11, 30, 7, 0, tzinfo=UTC), uuid.UUID(int=7)
    record(
        "alice",
        "portal.environment.approved",
        "env:1",
        {"at": when, "cost": Decimal("1.50"), "id": ident, "ratio": 0.25, "tags": ("a", "b")},
    )
    row = OutboxEvent.objects.get()
    assert row.data_jcs == (
        '{"at":"2026-11-30T07:00:00+00:00","cost":"1.50",'
        '"id":"00000000-0000-0000-0000-000000000007","ratio":0.25,"tags":["a","b"]}'
    )
    assert row.data == json.loads(row.data_jcs)


def test_nul_in_actor_is_refused_by_the_database_and_records_nothing():
    from django.db import DataError

    with pytest.raises(DataError), transaction.atomic():
        record("al\x00ice", "portal.environment.approved", "env:1", {})
    assert OutboxEvent.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_recording_survives_rollbacks_and_reconnects_and_maps_database_errors(settings):
    from django.db import IntegrityError, connection

    settings.KILN_AUDIT_RELAY_ON_COMMIT = False
    with pytest.raises(Boom), transaction.atomic():
        record("alice", "portal.environment.approved", "env:rolled-back", {})
        raise Boom
    record("alice", "portal.environment.approved", "env:after-rollback", {})
    connection.close()
    record("alice", "portal.environment.approved", "env:after-reconnect", {"n": 1})
    with pytest.raises(IntegrityError), transaction.atomic():  # a database error maps to Django's
        first = OutboxEvent.objects.get(target="env:after-rollback").event_id
        with connection.cursor() as cursor:
            cursor.execute(
                "ALTER TABLE audit_outboxevent ADD CONSTRAINT one_target CHECK (target <> 'env:x')"
            )
        record("alice", "portal.environment.approved", "env:x", {"first": str(first)})
    assert sorted(OutboxEvent.objects.values_list("target", flat=True)) == [
        "env:after-reconnect",
        "env:after-rollback",
    ]
    OutboxEvent.objects.all().delete()


def test_an_outbox_row_written_before_data_jcs_existed_is_chained_with_canonical_data():
    from datetime import UTC, datetime

    OutboxEvent.objects.create(
        recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
        actor="alice",
        action="portal.environment.approved",
        target="env:old",
        data={"b": [1, 2.5], "a": "ü"},
    )
    record("alice", "portal.environment.approved", "env:new", {"n": 1})
    assert drain()["appended"] == 2
    assert list(ChainEvent.objects.values_list("target", "data")) == [
        ("env:old", '{"a":"ü","b":[1,2.5]}'),
        ("env:new", '{"n":1}'),
    ]
