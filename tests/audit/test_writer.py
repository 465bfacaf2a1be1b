"""The single writer under faults: redelivery, a writer killed mid-batch, a second writer, concurrency."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
import redis
from django.db import connection, transaction

from audit import record
from audit.chain.topic import get_topic
from audit.chain.verification import verify_chain
from audit.chain.writer import AuditWriter
from audit.models import ChainEvent, Checkpoint, OutboxEvent
from audit.services import chain_append, relay_publish
from tests.audit.conftest import drain, subprocess_env

ROOT = Path(__file__).resolve().parents[2]


def assert_contiguous(expected_ids: set) -> None:
    rows = list(ChainEvent.objects.order_by("seq").values_list("seq", "event_id"))
    assert [s for s, _ in rows] == list(range(1, len(rows) + 1)), "gap or reordering in seq"
    ids = [e for _, e in rows]
    assert len(ids) == len(set(ids)), "duplicate event"
    assert set(ids) == expected_ids
    report = verify_chain()
    assert report.ok, report.message


@pytest.mark.django_db
def test_the_same_stream_entry_delivered_twice_makes_one_row(settings):
    event_id = record("alice", "portal.environment.approved", "env:1")
    relay_publish()
    client = redis.Redis.from_url(settings.REDIS_URL)
    [(_, fields)] = client.xrange(settings.KILN_AUDIT_STREAM)
    client.xadd(settings.KILN_AUDIT_STREAM, fields)  # redelivered in a later batch
    stats = drain()
    assert (stats["appended"], stats["duplicates"]) == (1, 1)
    # ... and twice inside one batch
    result = chain_append(messages=[("1-0", fields[b"e"]), ("2-0", fields[b"e"])])
    assert (result.appended, result.duplicates) == (0, 2)
    assert list(ChainEvent.objects.values_list("event_id", flat=True)) == [event_id]
    assert get_topic().backlog() == 0


@pytest.mark.django_db
def test_malformed_stream_entries_are_left_out_and_acknowledged(settings):
    get_topic().publish([b"not json", b'{"event_id": "x"}'])
    record("alice", "portal.environment.approved", "env:1")
    stats = drain()
    assert (stats["appended"], stats["malformed"]) == (1, 2)
    assert get_topic().backlog() == 0


def _record_many(n: int, per_tx: int = 100) -> set:
    ids = set()
    for start in range(0, n, per_tx):
        with transaction.atomic():
            for i in range(start, min(n, start + per_tx)):
                ids.add(record("loader", "portal.environment.approved", f"env:{i}", {"i": i}))
    return ids


@pytest.mark.django_db(transaction=True)
def test_writer_killed_mid_batch_restarts_with_no_gap_and_no_duplicate(settings, committed_chain):
    ids = _record_many(1000)
    assert relay_publish() == 1000
    writer = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "audit_writer",
            "--batch-size",
            "100",
            "--batch-pause",
            "1.0",  # 8 s for the remaining batches: a stalled test still kills it mid-way
        ],
        cwd=ROOT,
        env=subprocess_env(settings, KILN_TRACING="0"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while ChainEvent.objects.count() < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # inside the next batch's open transaction
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
    chained = ChainEvent.objects.count()
    assert 200 <= chained < 1000 and chained % 100 == 0, chained
    assert get_topic().backlog() > 0  # the killed batch was delivered but not acknowledged
    restarted = subprocess.run(
        [sys.executable, "manage.py", "audit_writer", "--once"],
        cwd=ROOT,
        env=subprocess_env(settings, KILN_TRACING="0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert restarted.returncode == 0, restarted.stderr
    assert_contiguous(ids)
    assert OutboxEvent.objects.count() == 0 and get_topic().backlog() == 0
    assert Checkpoint.objects.order_by("-size").first().size == 1000


@pytest.mark.django_db(transaction=True)
def test_a_second_writer_waits_for_the_lock(settings, committed_chain):
    from audit.chain.writer import LOCK_KEY

    ids = _record_many(10)
    db = connection.settings_dict
    holder = psycopg.connect(
        host=db["HOST"],
        port=db["PORT"] or 5432,
        dbname=db["NAME"],
        user=db["USER"],
        autocommit=True,
    )
    holder.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
    second = subprocess.Popen(
        [sys.executable, "manage.py", "audit_writer", "--once"],
        cwd=ROOT,
        env=subprocess_env(settings, KILN_TRACING="0"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(2.0)
        assert second.poll() is None, "the second writer did not wait"
        assert ChainEvent.objects.count() == 0
        holder.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
        assert second.wait(timeout=30) == 0
    finally:
        if second.poll() is None:
            second.kill()
        holder.close()
    assert_contiguous(ids)


@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_recorders_make_one_contiguous_chain(settings, committed_chain):
    stop = threading.Event()
    writer = AuditWriter(block_ms=100, sweep_seconds=0.05, batch_size=500)
    writer_thread = threading.Thread(target=writer.run, args=(stop,))
    writer_thread.start()
    recorded: list[set] = [set() for _ in range(8)]
    errors: list[BaseException] = []

    def recorder(n: int) -> None:
        try:
            for i in range(500):
                recorded[n].add(
                    record(f"user{n}", "portal.environment.approved", f"env:{n}:{i}", {"i": i})
                )
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=recorder, args=(n,)) for n in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        deadline = time.monotonic() + 30
        while ChainEvent.objects.count() < 4000 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        writer_thread.join(timeout=30)
    assert not errors
    assert_contiguous(set().union(*recorded))
    assert len(set().union(*recorded)) == 4000


@pytest.mark.django_db(transaction=True)
def test_standalone_runs_relay_and_writer_in_process_without_redis(settings, committed_chain):
    from audit.chain import runtime

    settings.REDIS_URL = None  # the in-process topic
    settings.KILN_AUDIT_CHECKPOINT_SECONDS = 0.2
    services = [runtime.relay_service(), runtime.writer_service()]
    for s in services:
        s.start()
    try:
        time.sleep(0.2)
        ids = _record_many(30, per_tx=10)
        deadline = time.monotonic() + 15
        while ChainEvent.objects.count() < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        deadline = time.monotonic() + 5
        while not Checkpoint.objects.filter(size=30).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for s in reversed(services):
            s.stop()
    assert_contiguous(ids)
    assert Checkpoint.objects.filter(size=30).exists()


@pytest.mark.django_db
def test_checkpoints_are_pushed_to_directory_and_git_anchors(settings, tmp_path):
    from audit.chain.anchors import configured_anchors

    settings.KILN_AUDIT_ANCHORS = f"dir:{tmp_path / 'dir'},git:{tmp_path / 'git'}"
    for batch in range(2):
        record("alice", "portal.environment.approved", f"env:{batch}")
        drain()
    directory, git = configured_anchors()
    assert sorted(p.name for p in (tmp_path / "dir").iterdir()) == [
        "checkpoint-000000000001.txt",
        "checkpoint-000000000002.txt",
        "latest",
    ]
    log = subprocess.run(
        ["git", "-C", str(tmp_path / "git"), "log", "--format=%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert log[:2] == ["audit checkpoint 2", "audit checkpoint 1"]
    latest = Checkpoint.objects.order_by("-size").first()
    assert git.latest() == directory.latest() == latest.note
    assert "git:" in latest.anchored and "FAILED" not in latest.anchored
