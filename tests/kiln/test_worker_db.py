"""A worker's tasks survive their database connections going away (kiln/worker_db.py): a
PostgreSQL restart ends every session, which a worker's pool process keeps across tasks."""

from __future__ import annotations

import json
import time

import pytest
import redis
from django.db import connection

from kiln.celery import app
from portal.services.queueing import REAP_TASK
from tests.audit.conftest import subprocess_env
from tests.kiln.standalone_process import free_port
from tests.support.shape import Shape

WORKER_SESSIONS = "kiln-worker-db-test"


def _state(client: redis.Redis, task_id: str) -> str:
    raw = client.get(f"celery-task-meta-{task_id}")
    return json.loads(raw)["status"] if raw else "PENDING"


def _run(client: redis.Redis, shape: Shape, timeout: float = 30) -> str:
    """Send the reaper task (it reads the database, and keeps its result) and wait for it."""
    task_id = app.send_task(REAP_TASK).id
    deadline = time.monotonic() + timeout
    while _state(client, task_id) not in ("SUCCESS", "FAILURE"):
        assert time.monotonic() < deadline, shape.processes["worker"].log.read_text()[-3000:]
        time.sleep(0.1)
    return _state(client, task_id)


@pytest.mark.django_db(transaction=True)
def test_a_pool_process_whose_sessions_were_ended_runs_its_next_tasks(settings, tmp_path):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete("celery", "unacked", "unacked_index")
    environment = subprocess_env(settings)
    # The worker's sessions are named, so that only they are ended: ending every session of the
    # database would end this process's own pooled ones too, and the next test would find them dead.
    environment["DATABASE_URL"] += f"?application_name={WORKER_SESSIONS}"
    shape = Shape(
        port=free_port(), environment=environment, workdir=tmp_path,
        names=("worker",), worker_concurrency=1,
    )  # fmt: skip
    try:
        shape.start("worker")
        assert _run(client, shape, timeout=90) == "SUCCESS"  # the pool process holds a session
        with connection.cursor() as cursor:  # what a restart of PostgreSQL does to it
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = %s",
                [WORKER_SESSIONS],
            )
            assert cursor.fetchone()[0] >= 1
        assert _run(client, shape) == "SUCCESS"  # retried on a new connection, not failed
        assert _run(client, shape) == "SUCCESS"  # and the process keeps a live one
    finally:
        shape.stop_all()
        client.close()
