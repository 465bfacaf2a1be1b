"""Measure request-to-READY through the API, policy gate, approval, Celery and the simulated cluster.

The worker has the production shape by default when the broker is shared
(Redis): a separate `celery -A kiln worker --pool prefork` process pool, as
`make dev` runs it; the bench waits until its queue is empty before measuring
and stops it after each profile. On the memory transport (standalone) it is an
in-process thread pool (`--worker threads`).

`--requests` environments go through the API (Django's test client, in this
process) from `--concurrency` clients. By default (`--arrival closed`) each
client carries one request to READY before it sends the next, so exactly
`--concurrency` requests are in flight, as a load generator's concurrency
means; `--arrival burst` has the clients send every POST as fast as they can
without waiting, which measures the queue a burst of 100 builds as well. The
first `--warmup` requests (default: one per client) go through the same path
but are left out of the figures, so that they describe the steady state and not
every process's first request and the simultaneous start of all clients. Every
fifth request is staging and is approved over the API by a second person; one
in ten is retried with the same Idempotency-Key. It prints p50/p95
request-to-READY for the zero-delay profile (Kiln's own overhead) and the
realistic delay profile, plus how many environments were lost or duplicated,
with the load average around each profile. Once measured, the bench's
environments are handed to teardown over the API (DELETE).
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import statistics
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from rest_framework.test import APIClient

from audit.models import ChainEvent, OutboxEvent
from kiln import benchjson
from kiln.identity import services as identity
from kiln.identity.permissions import APPROVER, ENGINEER, system_actor
from kiln.management.waiting import wait_until
from kiln.standalone import (
    Service,
    audit_writer_service,
    prefork_worker_service,
    services_together,
)
from portal.models import Environment, Membership, Team

URL = "/api/v1/environments/"
TEAM = "kiln-bench"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


class Command(BaseCommand):
    help = "Benchmark request-to-READY (zero-delay and realistic profiles); prints JSON."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--requests", type=int, default=100)
        parser.add_argument("--concurrency", type=int, default=20)
        parser.add_argument(
            "--worker",
            choices=["threads", "prefork"],
            default=None,
            help="prefork (default on a shared broker): a separate `celery worker` process pool "
            "on the configured broker, as `make dev` runs it; threads (default on the memory "
            "transport): an in-process thread pool",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=None,
            help="worker concurrency: processes (default 2) or threads (default 4)",
        )
        parser.add_argument(
            "--warmup",
            type=int,
            default=None,
            help="requests sent first and left out of the figures, so they describe the steady "
            "state rather than every process's first request (default: --concurrency)",
        )
        parser.add_argument(
            "--arrival",
            choices=["closed", "burst"],
            default="closed",
            help="closed: each client waits for READY before its next request (--concurrency "
            "in flight); burst: clients send every request without waiting",
        )
        parser.add_argument("--profile", choices=["zero", "realistic", "both"], default="both")
        parser.add_argument(
            "--timeout", type=float, default=180.0, help="seconds to wait for READY"
        )
        parser.add_argument("--json", action="store_true", help="print JSON only")

    def handle(self, *args, **opts) -> None:
        from kiln.celery import app

        started_at = benchjson.now()
        app.conf.task_always_eager = False
        shared = str(app.conf.broker_url or "").startswith(("redis://", "rediss://", "amqp://"))
        opts["worker"] = opts["worker"] or ("prefork" if shared else "threads")
        opts["workers"] = opts["workers"] or (2 if opts["worker"] == "prefork" else 4)
        if opts["warmup"] is None:
            opts["warmup"] = opts["concurrency"]
        if opts["worker"] == "threads":
            # The bench's own in-process worker and broker: nothing leaves this process.
            app.conf.broker_url = "memory://localhost/"
            app.conf.result_backend = "cache+memory://"
        elif not shared:
            raise CommandError("--worker prefork needs a broker other processes see (REDIS_URL)")
        settings.KILN_TEAM_LIMITS = "cpu=100000,memoryGi=100000,gpu=1000,environments=100000"
        engineer, approver = self._people()
        profiles = ["zero", "realistic"] if opts["profile"] == "both" else [opts["profile"]]
        self.finished: list[str] = []
        results = {}
        loads = {}
        backlog = {}
        for profile in profiles:
            settings.KILN_SIM_DELAY_PROFILE = profile
            settings.KILN_SIM_DELAY_SCALE = 1.0
            worker = self._worker(opts, profile)
            worker.start()
            try:
                # Measure this run alone: no earlier bench work queued or still tearing down.
                backlog[profile] = {
                    "queued": wait_for_empty_queue(timeout=180.0)
                    if opts["worker"] == "prefork"
                    else 0,
                    "tearing_down": wait_for_teardown(timeout=180.0),
                }
                before = os.getloadavg()
                cpu_before = (process_cpu_seconds(), worker_cpu_seconds())
                results[profile] = self._run(profile, engineer, approver, opts)
                after = os.getloadavg()
                sent = opts["requests"] + opts["warmup"]
                results[profile]["cpu_ms_per_environment"] = {
                    "bench_process": round(
                        (process_cpu_seconds() - cpu_before[0]) * 1000 / sent, 1
                    ),
                    "worker_and_audit_writer": round(
                        (worker_cpu_seconds() - cpu_before[1]) * 1000 / sent, 1
                    )
                    if opts["worker"] == "prefork"
                    else None,
                }
                loads[profile] = {
                    "before": [round(x, 2) for x in before],
                    "after": [round(x, 2) for x in after],
                }
                if profile == profiles[-1]:
                    self._teardown(engineer)
                    if opts["worker"] == "prefork":
                        wait_for_empty_queue(timeout=60.0)  # leave no bench work queued behind
            finally:
                worker.stop()
        report = {
            "requests": opts["requests"],
            "concurrency": opts["concurrency"],
            "arrival": opts["arrival"],
            "warmup_requests": opts["warmup"],
            "worker": opts["worker"],
            "workers": opts["workers"],
            "database": connection.vendor,
            "broker": str(app.conf.broker_url).split("://")[0],
            "cpus": os.cpu_count(),
            "load_average": loads,
            "earlier_work_before_start": backlog,
            "profiles": results,
            "target": {"p95_overhead_seconds": 1.0},
        }
        if "zero" in results:
            report["target"]["met"] = results["zero"]["p95_seconds"] <= 1.0
        report = benchjson.stamped(report, name="provision_bench", date=started_at)
        self.stdout.write(json.dumps(report, indent=None if opts["json"] else 2))

    def _worker(self, opts, profile: str) -> Service:
        """The Celery worker the bench drives: a separate prefork pool or in-process threads."""
        if opts["worker"] == "threads":
            from kiln.standalone import celery_worker_service

            service = celery_worker_service(concurrency=opts["workers"])
            start = service.start

            def started() -> None:
                start()
                time.sleep(0.5)

            return Service(service.name, started, service.stop)
        return prefork_worker(opts["workers"], profile)

    def _people(self):
        User = get_user_model()
        actor = system_actor("provision-bench")
        team = Team.objects.filter(slug=TEAM).first() or identity.team_create(
            actor=actor, slug=TEAM, name="Provisioning benchmark"
        )
        people = []
        for username, role in (("bench-engineer", ENGINEER), ("bench-approver", APPROVER)):
            user, _ = User.objects.get_or_create(username=username)
            user.groups.add(Group.objects.get_or_create(name=role)[0])
            if role == ENGINEER and not Membership.objects.filter(user=user, team=team).exists():
                identity.membership_add(actor=actor, team=team, username=username)
            people.append(user)
        return people

    def _run(self, profile: str, engineer, approver, opts) -> dict:
        run = "b" + secrets.token_hex(3)
        n = opts["requests"]
        warmup = opts["warmup"]
        warmed: list[str] = []
        submitted: dict[str, float] = {}
        api_ms: list[float] = []
        errors: Counter = Counter()
        lock = threading.Lock()

        def one(i: int) -> None:
            client, boss = clients_of_this_thread()
            staging = i % 5 == 4
            body = {
                "team": TEAM,
                "name": f"{run}-{i}",
                "env_class": "staging" if staging else "dev",
                "ttl_hours": 24,
                "workload_class": "standard",
                "cpu": 1,
                "memory_gib": 1,
            }
            key = f"{run}-{i}"
            t0 = time.time()
            response = client.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
            elapsed = (time.time() - t0) * 1000
            if response.status_code != 201:
                with lock:
                    errors[f"create {response.status_code}"] += 1
                return
            env_id = response.json()["id"]
            if i % 10 == 3:  # a client retry: must return the same environment
                retry = client.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
                if retry.status_code != 200 or retry.json()["id"] != env_id:
                    with lock:
                        errors["idempotent retry mismatch"] += 1
            if staging:
                decided = boss.post(f"{URL}{env_id}/approve/", {"reason": "bench"}, format="json")
                if decided.status_code != 200:
                    with lock:
                        errors[f"approve {decided.status_code}"] += 1
            with lock:
                if i < warmup:
                    warmed.append(env_id)
                else:
                    submitted[env_id] = t0
                    api_ms.append(elapsed)
            if closed and not watcher.wait(env_id, timeout=max(0.0, deadline - time.time())):
                with lock:
                    errors["not settled in time"] += 1

        local = threading.local()

        def clients_of_this_thread() -> tuple[APIClient, APIClient]:
            """The engineer's and the approver's client, made once per client thread: a client
            loads the middleware stack when it is made, as a server process does once."""
            if not hasattr(local, "clients"):
                client, boss = APIClient(), APIClient()
                client.force_authenticate(user=engineer)
                boss.force_authenticate(user=approver)
                local.clients = (client, boss)
            return local.clients

        closed = opts["arrival"] == "closed"
        watcher = SettledWatcher()
        started = time.time()
        deadline = started + opts["timeout"]
        watcher.start()
        try:
            run_clients(one, warmup + n, opts["concurrency"])
        finally:
            watcher.stop()
        ids = list(submitted)
        self.finished.extend(warmed)
        settled = Environment.objects.filter(
            public_id__in=ids, status__in=["READY", "FAILED", "DENIED"]
        )
        wait_until(
            lambda: settled.count() >= len(ids),
            timeout=max(0.0, deadline - time.time()),
            stated_timeout=opts["timeout"],
            poll=0.1,
            what=lambda: (
                f"{len(ids) - settled.count()} of {len(ids)} environments reached neither READY "
                "nor FAILED (is the worker consuming the broker?)"
            ),
        )
        wall = time.time() - started
        envs = list(Environment.objects.filter(public_id__in=ids))
        latencies = [
            (e.ready_at - datetime.fromtimestamp(submitted[e.public_id], tz=UTC)).total_seconds()
            for e in envs
            if e.status == "READY" and e.ready_at
        ]
        created = Environment.objects.filter(name__startswith=f"{run}-").count() - len(warmed)
        targets = [f"portal.environment:{i}" for i in ids]
        # One readied event per environment, counted by event id: while the relay hands an event
        # over, it can be both in the outbox and (by the writer) already in the chain.
        readied_events = set(
            OutboxEvent.objects.filter(
                target__in=targets, action="portal.environment.readied"
            ).values_list("target", "event_id")
        ) | set(
            ChainEvent.objects.filter(
                target__in=targets, action="portal.environment.readied"
            ).values_list("target", "event_id")
        )
        readied = Counter(target for target, _ in readied_events)
        duplicated = max(0, created - n) + sum(max(0, c - 1) for c in readied.values())
        result = {
            "ready": len(latencies),
            "failed": sum(1 for e in envs if e.status in ("FAILED", "DENIED")),
            "lost": n - len(latencies) - sum(1 for e in envs if e.status in ("FAILED", "DENIED")),
            "duplicated": duplicated,
            "errors": dict(errors),
            "p50_seconds": round(statistics.median(latencies), 3) if latencies else None,
            "p95_seconds": round(percentile(latencies, 95), 3) if latencies else None,
            "max_seconds": round(max(latencies), 3) if latencies else None,
            "api_create_p50_ms": round(statistics.median(api_ms), 1) if api_ms else None,
            "wall_seconds": round(wall, 2),
        }
        self.finished.extend(ids)
        return result

    def _teardown(self, engineer) -> None:
        """Hand every bench environment to teardown over the API and give the worker a moment to
        finish it (the reaper resumes whatever is left)."""
        client = APIClient()
        client.force_authenticate(user=engineer)
        for env_id in self.finished:
            client.delete(f"{URL}{env_id}/?reason=benchmark+finished")
        wait_for_teardown(timeout=120.0)


def run_clients(one, n: int, concurrency: int) -> None:
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
    """One thread that polls the database for environments that reached READY, FAILED or DENIED
    and wakes the client waiting on each, so closed-loop clients cost one query per poll in all."""

    SETTLED = ("READY", "FAILED", "DENIED")

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.waiting: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="settled-watcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()

    def wait(self, public_id: str, timeout: float) -> bool:
        with self.lock:
            event = self.waiting.setdefault(public_id, threading.Event())
        return event.wait(timeout)

    def _poll(self) -> None:
        try:
            while not self.stopped.wait(self.interval):
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
        finally:
            connection.close()


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
    from amqp.exceptions import ChannelError

    from kiln.celery import app

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
