"""The provisioning benchmark's harness: the processes it drives, its people and clients, and
the loop that carries requests through the API to READY.

With a shared broker (Redis) it runs the production shape (`tests.support.shape`), as `make dev` does:
the web as uvicorn processes, called over HTTP (`clients.HttpApi`), a separate prefork Celery
worker and the audit writer. On the memory transport (standalone) the worker is an in-process
thread pool and the API is called through Django's test client in this process
(`clients.InProcessApi`), whose client threads each keep their database connection across
their requests, as a web server's threads do.
"""

from __future__ import annotations

import os
import resource
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amqp.exceptions import ChannelError
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from rest_framework.test import APIClient

from bench.portal.clients import URL, BenchApi
from bench.waiting import wait_until
from kiln import changes
from kiln.celery import app
from kiln.identity import services as identity
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import APPROVER, ENGINEER, system_actor
from kiln.standalone import (
    Service,
    audit_writer_service,
    celery_worker_service,
    prefork_worker_service,
    services_together,
)
from portal.models import Environment
from portal.selectors import change_key_of
from tests.support.shape import Shape, TokenIssuer, free_port

TEAM = "kiln-bench"
# No team quota stands between the bench and its requests (the policy still checks each).
TEAM_LIMITS = "cpu=100000,memoryGi=100000,gpu=1000,environments=100000"
SETTLED = ("READY", "FAILED", "DENIED")


@dataclass
class Observed:
    """What one profile's run saw: when each measured request was sent (by public id), the
    warm-up environments, the API's create times, the client errors and the wall time."""

    run: str
    submitted: dict[str, float] = field(default_factory=dict)
    warmed: list[str] = field(default_factory=list)
    api_ms: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    wall: float = 0.0


def bench_people() -> list[Any]:
    """The bench's engineer and approver, both members of its team (approvers act for their
    own teams), made once."""
    User = get_user_model()
    actor = system_actor("provision-bench")
    team = Team.objects.filter(slug=TEAM).first() or identity.team_create(
        actor=actor, slug=TEAM, name="Provisioning benchmark"
    )
    people = []
    for username, role in (("bench-engineer", ENGINEER), ("bench-approver", APPROVER)):
        user, _ = User.objects.get_or_create(username=username)
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        if not Membership.objects.filter(user=user, team=team).exists():
            identity.membership_add(actor=actor, team=team, username=username)
        people.append(user)
    return people


def production_shape(*, profile: str, workers: int, workdir: Path, issuer: TokenIssuer) -> Shape:
    """The web (over HTTP, one process per core), the prefork worker and the audit writer, with
    the given delay profile and the bench's team limits; each profile starts its own."""
    environment = {
        **issuer.environment(),
        "KILN_SIM_DELAY_PROFILE": profile,
        "KILN_SIM_DELAY_SCALE": "1.0",
        "KILN_DELIVERY_BACKEND": "simulated",
        "KILN_TEAM_LIMITS": TEAM_LIMITS,
        "KILN_SECURE_COOKIES": "0",
    }
    return Shape(
        port=free_port(),
        environment=environment,
        workdir=workdir / profile,
        names=("web", "worker", "writer"),
        worker_concurrency=workers,
        hostname="provision-bench",
    )


def bench_worker(*, kind: str, workers: int, profile: str) -> Service:
    """The Celery worker the bench drives: a separate prefork pool or in-process threads."""
    if kind == "threads":
        service = celery_worker_service(concurrency=workers)
        start = service.start

        def started() -> None:
            start()
            time.sleep(0.5)

        return Service(service.name, started, service.stop)
    return prefork_worker(workers, profile)


def drive(
    *,
    api: BenchApi,
    team: str,
    requests: int,
    warmup: int,
    concurrency: int,
    closed: bool,
    timeout: float,
) -> Observed:
    """Send `warmup + requests` environment requests for `team` from `concurrency` clients through
    `api`, and wait until every measured one is READY, FAILED or DENIED.

    Every fifth request is staging and is approved over the API by the approver; one in ten is
    retried with the same Idempotency-Key and must return the same environment. `closed`: each
    client waits for its request to settle before it sends the next.
    """
    observed = Observed(run="b" + secrets.token_hex(3))
    lock = threading.Lock()

    def one(i: int) -> None:
        staging = i % 5 == 4
        body = {
            "team": team,
            "name": f"{observed.run}-{i}",
            "env_class": "staging" if staging else "dev",
            "ttl_hours": 24,
            "workload_class": "standard",
            "cpu": 1,
            "memory_gib": 1,
        }
        key = f"{observed.run}-{i}"
        t0 = time.time()
        status, answer = api.create(body, key)
        elapsed = (time.time() - t0) * 1000
        if status != 201:
            with lock:
                observed.errors[f"create {status}"] += 1
            return
        env_id = answer["id"]
        if i % 10 == 3:  # a client retry: must return the same environment
            status, again = api.create(body, key)
            if status != 200 or again.get("id") != env_id:
                with lock:
                    observed.errors["idempotent retry mismatch"] += 1
        if staging:
            status = api.approve(env_id)
            if status != 200:
                with lock:
                    observed.errors[f"approve {status}"] += 1
        with lock:
            if i < warmup:
                observed.warmed.append(env_id)
            else:
                observed.submitted[env_id] = t0
                observed.api_ms.append(elapsed)
        if closed and not watcher.wait(env_id, timeout=max(0.0, deadline - time.time())):
            with lock:
                observed.errors["not settled in time"] += 1

    watcher = SettledWatcher()
    started = time.time()
    deadline = started + timeout
    watcher.start()
    try:
        run_clients(one, warmup + requests, concurrency)
    finally:
        watcher.stop()
    ids = list(observed.submitted)
    settled = Environment.objects.filter(public_id__in=ids, status__in=SETTLED)
    wait_until(
        lambda: settled.count() >= len(ids),
        timeout=max(0.0, deadline - time.time()),
        stated_timeout=timeout,
        poll=0.1,
        what=lambda: (
            f"{len(ids) - settled.count()} of {len(ids)} environments reached neither READY "
            "nor FAILED (is the worker consuming the broker?)"
        ),
    )
    observed.wall = time.time() - started
    return observed


def hand_to_teardown(*, engineer: Any, public_ids: list[str]) -> None:
    """Hand every bench environment to teardown over the API and give the worker a moment to
    finish it (the reaper resumes whatever is left)."""
    client = APIClient()
    client.force_authenticate(user=engineer)
    for env_id in public_ids:
        client.delete(f"{URL}{env_id}/?reason=benchmark+finished")
    wait_for_teardown(timeout=120.0)


def run_clients(one: Callable[[int], None], n: int, concurrency: int) -> None:
    """Call one(0..n-1) from `concurrency` threads. Each thread keeps its database connection
    across its requests, as a web server's threads do (CONN_MAX_AGE), and closes it at the end."""
    indexes = iter(range(n))
    take = threading.Lock()
    failures: list[BaseException] = []

    def client() -> None:
        try:
            while True:
                with take:
                    i = next(indexes, None)
                if i is None:
                    return
                one(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=client, name=f"client-{k}") for k in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def process_cpu_seconds() -> float:
    """CPU time (user + system) of this process, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker_cpu_seconds() -> float:
    """CPU time of the bench's prefork worker processes (the parent and its pool), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"provision-bench-" not in (entry / "cmdline").read_bytes():
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process exited meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


class SettledWatcher:
    """One thread that wakes each client waiting for its environment to reach READY, FAILED or
    DENIED. It reads the database when a change notice names a waited-for environment (a
    status transition announces itself as it commits, `kiln.changes`) or a client starts
    waiting, and at least every `recheck` seconds in case a notice was lost: one query per
    wake-up for all the waiting clients, so the bench's own reads stay off the measured path's
    CPU. Latency is read from the environments' own timestamps, never from this thread."""

    SETTLED = SETTLED

    def __init__(self, recheck: float = 0.5, gather: float = 0.002) -> None:
        self.recheck, self.gather = recheck, gather
        self.waiting: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.changed = threading.Event()  # set by change notices and new waiters
        self.thread = threading.Thread(target=self._poll, name="settled-watcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.changed.set()
        self.thread.join()
        with self.lock:
            for public_id in self.waiting:
                changes.unlisten(change_key_of(public_id), self.changed)

    def wait(self, public_id: str, timeout: float) -> bool:
        with self.lock:
            event = self.waiting.get(public_id)
            if event is None:
                event = self.waiting[public_id] = threading.Event()
                changes.listen(change_key_of(public_id), self.changed)
        self.changed.set()  # it may have settled before it was listened to
        return event.wait(timeout)

    def _poll(self) -> None:
        try:
            while not self.stopped.is_set():
                self.changed.wait(self.recheck)
                time.sleep(self.gather)  # one read for the notices that arrive together
                self.changed.clear()
                with self.lock:
                    pending = [k for k, e in self.waiting.items() if not e.is_set()]
                if not pending:
                    continue
                settled = Environment.objects.filter(
                    public_id__in=pending, status__in=self.SETTLED
                ).values_list("public_id", flat=True)
                with self.lock:
                    for public_id in settled:
                        self.waiting[public_id].set()
                        changes.unlisten(change_key_of(public_id), self.changed)
        finally:
            connection.close()


def stand_in_for_autovacuum() -> dict[str, Any]:
    """Before a profile: with the server's autovacuum off (a configuration some test machines
    use for speed), the dead rows every earlier run left in the tables the bench writes (an
    outbox row is inserted, updated and deleted; an environment is updated at every
    transition) pile up from run to run and no table is analysed again, so each run would
    measure a database no running server has. Then the bench runs VACUUM (ANALYZE), as
    autovacuum would have between the runs, and says so. With autovacuum on, nothing is done.
    Returns whether autovacuum is on, the dead rows found and whether it vacuumed."""
    if connection.vendor != "postgresql":
        return {"autovacuum": None, "dead_rows": None, "vacuumed": False}
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('autovacuum') = 'on'")
        autovacuum = bool(cursor.fetchone()[0])
        cursor.execute("SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables")
        dead = int(cursor.fetchone()[0])
        if not autovacuum:
            cursor.execute("VACUUM (ANALYZE)")  # outside a transaction: autocommit here
    return {"autovacuum": autovacuum, "dead_rows": dead, "vacuumed": not autovacuum}


def wait_for_teardown(timeout: float) -> int:
    """Wait until no bench environment is tearing down (the worker finishes what an earlier run
    handed over); returns how many were tearing down at first."""
    tearing = Environment.objects.filter(team__slug=TEAM, status="TEARING_DOWN")
    first = tearing.count()
    deadline = time.time() + timeout
    while tearing.exists() and time.time() < deadline:
        time.sleep(0.5)
    return first


def queue_length() -> int:
    """Messages waiting in the default task queue of the broker (0 when it was never declared)."""
    with app.connection_for_write() as conn:
        try:
            _, count, _ = conn.default_channel.queue_declare(
                queue=app.conf.task_default_queue, passive=True
            )
        except ChannelError:  # Redis: an empty queue is no key at all
            return 0
    return int(count)


def wait_for_empty_queue(timeout: float) -> int:
    """Wait until the worker has drained whatever was queued before (returns what was queued),
    so a run measures its own requests and not an earlier backlog."""
    queued = queue_length()
    deadline = time.time() + timeout
    while queue_length() and time.time() < deadline:
        time.sleep(0.5)
    return queued


def prefork_worker(concurrency: int, profile: str) -> Service:
    """`celery -A kiln worker` (prefork, as `make dev` runs it) with the given delay profile."""
    environment = {
        "KILN_SIM_DELAY_PROFILE": profile,
        "KILN_SIM_DELAY_SCALE": "1.0",
        "KILN_DELIVERY_BACKEND": "simulated",
    }
    return services_together(
        audit_writer_service("provision-bench"),
        prefork_worker_service("provision-bench", concurrency, environment, loglevel="INFO"),
    )
