"""A worker killed whole, or one whose Redis restarted, loses nothing: the messages it held go
back on the queue once its heartbeat (per broker connection) has been gone a time to live
(kiln/task_recovery.py), not after Redis's hour."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
import redis

from audit.models import OutboxEvent
from bench.loadtest.faults import OwnServers
from bench.portal.harness import queue_length
from kiln.celery import app
from kiln.identity.models import Team
from kiln.task_recovery import ALIVE_PREFIX, HOLDERS_KEY, Recovery
from portal.models import Environment
from tests.audit.conftest import subprocess_env
from tests.kiln.standalone_process import free_port
from tests.support.shape import Shape

QUEUE = "kiln-test-recovery"


@pytest.fixture
def client():
    """The broker's Redis (the tests' own), with no task message, heartbeat or holder record
    left over before or after."""
    client = redis.Redis.from_url(app.conf.broker_url)

    def clean() -> None:
        parked = ("unacked", "unacked_index", "celery", QUEUE, HOLDERS_KEY)
        client.delete(*parked, *client.keys(ALIVE_PREFIX + "*"))

    clean()
    yield client
    clean()
    client.close()


def _recovery(client: redis.Redis, name: str, ttl: float = 1.0) -> Recovery:
    return Recovery(app=app, client=client, ttl=ttl, sweep_seconds=0.5, incarnation=name)


def _unacked(client: redis.Redis, tag: str) -> bool:
    return bool(client.hexists("unacked", tag))


def test_a_gone_holders_message_goes_back_after_a_whole_ttl_and_a_live_ones_stays(client):
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue(QUEUE)
        queue.put({"n": 1})
        queue.put({"n": 2})
        dead_message, live_message = queue.get(timeout=2), queue.get(timeout=2)
        dead, live = _recovery(client, "dead:1:a"), _recovery(client, "live:2:b")
        live.beat()
        dead.hold(dead_message.delivery_tag)  # never beat: its worker is gone
        live.hold(live_message.delivery_tag)
        sweeper = _recovery(client, "sweeper:3:c")
        # Seen missing at t=0 and t=0.5: not yet a whole TTL (1 s), nothing moves.
        assert sweeper.sweep(now=100.0) == []
        assert sweeper.sweep(now=100.5) == []
        assert _unacked(client, dead_message.delivery_tag)
        assert client.llen(QUEUE) == 0
        # A whole TTL after it was first seen missing: back on the queue, the live one stays.
        live.beat()
        assert sweeper.sweep(now=101.0) == [dead_message.delivery_tag]
        assert not _unacked(client, dead_message.delivery_tag)
        assert _unacked(client, live_message.delivery_tag)
        assert client.hkeys(HOLDERS_KEY) == [live_message.delivery_tag.encode()]
        again = queue.get(timeout=2)
        assert again.payload == {"n": 1}
        # Sweeping again restores nothing twice.
        assert sweeper.sweep(now=105.0) == []
        assert client.llen(QUEUE) == 0
        # An acknowledged message's record is forgotten; nothing is put back.
        live_message.ack()
        again.ack()
        assert sweeper.sweep(now=106.0) == [] and client.hlen(HOLDERS_KEY) == 0
        queue.close()


def test_a_message_no_worker_claimed_goes_back_after_a_whole_ttl(client):
    # Its worker died between the delivery and recording its hold: no holder, no heartbeat.
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue(QUEUE)
        queue.put({"n": "lost"})
        queue.put({"n": "claimed late"})
        lost, late = queue.get(timeout=2), queue.get(timeout=2)
        sweeper = _recovery(client, "sweeper:1:a")
        assert sweeper.sweep(now=20.0) == []  # both seen unclaimed for the first time
        _recovery(client, "slow:2:b").beat()
        _recovery(client, "slow:2:b").hold(late.delivery_tag)  # its worker records it after all
        assert sweeper.sweep(now=20.5) == []  # not yet a whole TTL (1 s)
        assert sweeper.sweep(now=21.0) == [lost.delivery_tag]
        assert not _unacked(client, lost.delivery_tag) and _unacked(client, late.delivery_tag)
        again = queue.get(timeout=2)
        assert again.payload == {"n": "lost"}
        _recovery(client, "next:3:c").hold(again.delivery_tag)
        assert sweeper.sweep(now=30.0) == []  # restored once; the claimed one stays
        late.ack()
        again.ack()
        queue.close()


def test_a_holder_that_comes_back_within_the_ttl_keeps_its_message(client):
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue(QUEUE)
        queue.put({"n": 1})
        message = queue.get(timeout=2)
        holder = _recovery(client, "slow:1:a")
        holder.hold(message.delivery_tag)
        sweeper = _recovery(client, "sweeper:2:b")
        assert sweeper.sweep(now=10.0) == []  # missing (a Redis outage let its key lapse)
        holder.beat()  # its heartbeat is back before a whole TTL passed
        assert sweeper.sweep(now=10.9) == []
        client.delete(ALIVE_PREFIX + "slow:1:a")
        assert sweeper.sweep(now=11.5) == []  # missing again: the clock starts over
        assert sweeper.sweep(now=12.6) == [message.delivery_tag]
        queue.get(timeout=2).ack()
        queue.close()


def _call(base: str, method: str, path: str, token: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(  # noqa: S310 - loopback
        base + path, method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return json.loads(response.read())


def _parked(client: redis.Redis) -> list[tuple[str, str, str]]:
    """(delivery tag, task, eta) of every unacknowledged message."""
    out = []
    for tag, raw in client.hgetall("unacked").items():
        message = json.loads(raw)[0]
        headers = message["headers"]
        out.append((tag.decode(), headers.get("task"), str(headers.get("eta"))))
    return out


def _wait(condition, timeout: float, what) -> None:
    deadline = time.monotonic() + timeout
    while not _holds(condition):
        assert time.monotonic() < deadline, what()
        time.sleep(0.1)


def _holds(condition) -> bool:
    # The test's own reads, not the worker's: a restarted Redis refuses them while it loads its
    # append-only file (BusyLoadingError, a ConnectionError), and that is "not yet", not a failure.
    try:
        return bool(condition())
    except redis.exceptions.ConnectionError:
        return False


@pytest.mark.django_db(transaction=True)
def test_sigkill_of_a_prefork_worker_with_tasks_in_hand_loses_none(
    settings, make_token, tmp_path, client
):
    Team.objects.create(slug="payments", name="Payments")
    alice = make_token(sub="alice", roles=["engineer"], team="payments")
    jwt = ("KILN_JWT_JWKS", "KILN_JWT_ISSUER", "KILN_JWT_AUDIENCE")
    environment = subprocess_env(
        settings,
        **{name: getattr(settings, name) for name in jwt},
        KILN_DELIVERY_BACKEND="simulated",
        # Each environment takes a few seconds of readiness polls: countdown messages the
        # worker holds while it waits, besides the one it runs.
        KILN_SIM_DELAY_PROFILE="realistic",
        KILN_SIM_DELAY_SCALE="4",
        KILN_CELERY_HOLDER_TTL="2",
        KILN_CELERY_RECOVERY_SECONDS="0.5",
    )
    shape = Shape(
        port=free_port(), environment=environment, workdir=tmp_path, names=("web", "worker"),
        worker_concurrency=2,
    )  # fmt: skip
    try:
        shape.start_all(timeout=90)
        _wait(lambda: client.keys(ALIVE_PREFIX + "*"), 60, lambda: "the worker never beat")
        ids = [
            _call(shape.base_url, "POST", "/api/v1/environments/", alice,
                  {"team": "payments", "name": f"kill-{i}", "env_class": "dev",
                   "ttl_hours": 24, "cpu": 1, "memory_gib": 1})["id"]
            for i in range(4)
        ]  # fmt: skip
        provisioning = Environment.objects.filter(public_id__in=ids, status="PROVISIONING")
        # Kill while the worker holds a message: on a busy machine its consumer may not have
        # fetched the next poll yet (then it waits in the queue, not in `unacked`).
        _wait(
            lambda: provisioning.count() >= 2 and client.hlen(HOLDERS_KEY) >= 2
            and client.hlen("unacked") >= 1,
            60,
            lambda: (list(Environment.objects.values_list("status", flat=True)),
                     client.hlen(HOLDERS_KEY), client.hlen("unacked")),
        )  # fmt: skip
        shape.kill("worker")  # SIGKILL of the main process and its pool: no warm shutdown
        parked = client.hlen("unacked")
        assert parked >= 1, "the killed worker held no message: the test would prove nothing"
        assert provisioning.exists()
        shape.start("worker")
        ready = Environment.objects.filter(public_id__in=ids, status="READY")
        _wait(
            lambda: ready.count() == 4,
            90,
            lambda: (list(Environment.objects.values_list("name", "status")),
                     client.hlen("unacked"), queue_length()),
        )  # fmt: skip
        _wait(
            lambda: not client.hlen("unacked") and not queue_length(),
            30,
            lambda: (_parked(client), client.hgetall(HOLDERS_KEY), queue_length()),
        )
    finally:
        shape.stop_all()
    # Every environment readied once: a task run again after the kill changed nothing twice.
    for public_id in ids:
        readied = OutboxEvent.objects.filter(
            target=f"portal.environment:{public_id}", action="portal.environment.readied"
        )
        assert readied.count() == 1, (public_id, list(readied.values_list("event_id", "created_at")))


def test_a_record_another_worker_wrote_since_the_sweep_read_is_kept(client):
    # A message put back keeps its delivery tag: the worker it reaches next records itself under
    # that tag, perhaps between the sweep's read (holder "dead") and its clean-up.
    client.hset(HOLDERS_KEY, mapping={"tag-1": "next:2:b", "tag-2": "dead:1:a"})
    sweeper = _recovery(client, "sweeper:3:c")
    sweeper._forget(["tag-1", "tag-2"], {"tag-1": "dead:1:a", "tag-2": "dead:1:a"})
    assert client.hgetall(HOLDERS_KEY) == {b"tag-1": b"next:2:b"}


def test_a_new_connection_keeps_the_running_tasks_and_puts_back_what_the_worker_dropped(client):
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue(QUEUE)
        queue.put({"n": "running"})
        queue.put({"n": "dropped"})
        running, dropped = queue.get(timeout=2), queue.get(timeout=2)
        worker = _recovery(client, "worker:1:a")
        worker.beat()
        worker.hold(running.delivery_tag)
        worker.hold(dropped.delivery_tag)
        client.hset(HOLDERS_KEY, "tag-elsewhere", "other:2:b")  # put back and taken by another
        # Reconnected: the consumer dropped every message but the running task's.
        old = worker.reincarnate([running.delivery_tag, "tag-elsewhere"])
        assert old == "worker:1:a" and worker.incarnation != old
        assert not client.exists(ALIVE_PREFIX + old)
        assert client.exists(ALIVE_PREFIX + worker.incarnation)
        assert client.hgetall(HOLDERS_KEY) == {
            running.delivery_tag.encode(): worker.incarnation.encode(),
            dropped.delivery_tag.encode(): old.encode(),
            b"tag-elsewhere": b"other:2:b",
        }
        client.hdel(HOLDERS_KEY, "tag-elsewhere")
        sweeper = _recovery(client, "sweeper:3:c")
        assert sweeper.sweep(now=50.0) == []  # the old incarnation is missing: not a TTL yet
        worker.beat()  # the live worker beats on, as its new incarnation
        assert sweeper.sweep(now=51.0) == [dropped.delivery_tag]
        assert _unacked(client, running.delivery_tag)  # still running: not run twice
        assert queue.get(timeout=2).payload == {"n": "dropped"}
        queue.close()


def _task_state(client: redis.Redis, task_id: str) -> str:
    raw = client.get(f"celery-task-meta-{task_id}")
    return json.loads(raw)["status"] if raw else "none"


@pytest.mark.django_db(transaction=True)
def test_a_redis_restart_under_a_live_worker_loses_no_message_it_held(settings, tmp_path):
    # A Redis of the test's own (append-only file on, as the load test's): restarted under a
    # live prefork worker that holds a countdown message, the message must still run.
    servers = OwnServers(redis_port=free_port(), directory=tmp_path / "redis")
    servers.start()
    url = servers.environment()["REDIS_URL"]
    broker = redis.Redis.from_url(url)
    environment = subprocess_env(
        settings, REDIS_URL=url, CELERY_BROKER_URL=url, CELERY_RESULT_BACKEND=url,
        KILN_CELERY_HOLDER_TTL="2", KILN_CELERY_RECOVERY_SECONDS="0.5",
    )  # fmt: skip
    shape = Shape(
        port=free_port(), environment=environment, workdir=tmp_path / "processes",
        names=("worker",), worker_concurrency=1,
    )  # fmt: skip
    try:
        shape.start("worker")
        _wait(lambda: broker.keys(ALIVE_PREFIX + "*"), 60, lambda: "the worker never beat")
        with app.connection_for_write(url) as conn:
            task_id = app.send_task(
                "celery.accumulate", args=["ran"], countdown=5, connection=conn
            ).id
        _wait(
            lambda: broker.hlen(HOLDERS_KEY) == 1 and broker.hlen("unacked") == 1,
            30,
            lambda: (broker.hgetall(HOLDERS_KEY), broker.hlen("unacked")),
        )
        servers.restart("redis")  # the fault run's own restart: SHUTDOWN, a second, start
        worker = shape.processes["worker"].popen
        _wait(
            lambda: _task_state(broker, task_id) == "SUCCESS" and not broker.hlen("unacked"),
            40,
            lambda: (_task_state(broker, task_id), _parked(broker), broker.hgetall(HOLDERS_KEY),
                     shape.processes["worker"].log.read_text()[-3000:]),
        )  # fmt: skip
        assert worker.poll() is None, "the worker died: the test is about a live one"
        assert broker.llen("celery") == 0
    finally:
        shape.stop_all()
        servers.stop()
        broker.close()
