"""Measure request-to-READY through the API, policy gate, approval, Celery and the simulated cluster.

Drives an in-process Celery worker (4 threads) on the memory transport by
default, so nothing is left queued between runs; `--worker prefork --workers 2`
starts a separate `celery -A kiln worker --pool prefork` process pool on the
configured broker (Redis) instead, as `make dev` runs it, waits until that
queue is empty before measuring, and stops it after each profile. Sends `--requests` POSTs through the API (Django's test client, in
this process) from `--concurrency` client threads (every fifth is staging and is
approved over the API by a second person; one in ten is retried with the same
Idempotency-Key), waits for READY and prints p50/p95 request-to-READY for the
zero-delay profile (Kiln's own overhead) and the realistic delay profile, plus
how many environments were lost or duplicated, with the load average around
each profile. Once measured, the bench's
environments are handed to teardown over the API (DELETE).
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, connection
from rest_framework.test import APIClient

from audit.models import ChainEvent, OutboxEvent
from kiln.identity import services as identity
from kiln.identity.permissions import APPROVER, ENGINEER, system_actor
from kiln.standalone import Service, prefork_worker_service
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
            default="threads",
            help="threads: an in-process thread pool on the memory transport (nothing is left "
            "queued between runs); prefork: a separate `celery worker` process pool on the "
            "configured broker, as `make dev` runs it",
        )
        parser.add_argument(
            "--workers", type=int, default=4, help="worker concurrency (threads or processes)"
        )
        parser.add_argument("--profile", choices=["zero", "realistic", "both"], default="both")
        parser.add_argument(
            "--timeout", type=float, default=180.0, help="seconds to wait for READY"
        )
        parser.add_argument("--json", action="store_true", help="print JSON only")

    def handle(self, *args, **opts) -> None:
        from kiln.celery import app

        app.conf.task_always_eager = False
        if opts["worker"] == "threads":
            # The bench's own in-process worker and broker: nothing leaves this process.
            app.conf.broker_url = "memory://localhost/"
            app.conf.result_backend = "cache+memory://"
        elif not str(app.conf.broker_url or "").startswith(("redis://", "rediss://", "amqp://")):
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
                if opts["worker"] == "prefork":
                    backlog[profile] = wait_for_empty_queue(timeout=180.0)
                before = os.getloadavg()
                results[profile] = self._run(profile, engineer, approver, opts)
                after = os.getloadavg()
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
            "worker": opts["worker"],
            "workers": opts["workers"],
            "database": connection.vendor,
            "broker": str(app.conf.broker_url).split("://")[0],
            "cpus": os.cpu_count(),
            "load_average": loads,
            "queued_before_start": backlog,
            "profiles": results,
            "target": {"p95_overhead_seconds": 1.0},
        }
        if "zero" in results:
            report["target"]["met"] = results["zero"]["p95_seconds"] <= 1.0
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
        submitted: dict[str, float] = {}
        api_ms: list[float] = []
        errors: Counter = Counter()
        lock = threading.Lock()

        def one(i: int) -> None:
            close_old_connections()
            client = APIClient()
            client.force_authenticate(user=engineer)
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
                boss = APIClient()
                boss.force_authenticate(user=approver)
                decided = boss.post(f"{URL}{env_id}/approve/", {"reason": "bench"}, format="json")
                if decided.status_code != 200:
                    with lock:
                        errors[f"approve {decided.status_code}"] += 1
            with lock:
                submitted[env_id] = t0
                api_ms.append(elapsed)
            connection.close()

        started = time.time()
        with ThreadPoolExecutor(max_workers=opts["concurrency"]) as pool:
            list(pool.map(one, range(n)))
        deadline = time.time() + opts["timeout"]
        ids = list(submitted)
        while time.time() < deadline:
            ready = Environment.objects.filter(public_id__in=ids, status="READY").count()
            failed = Environment.objects.filter(
                public_id__in=ids, status__in=["FAILED", "DENIED"]
            ).count()
            if ready + failed >= len(ids):
                break
            time.sleep(0.1)
        wall = time.time() - started
        envs = list(Environment.objects.filter(public_id__in=ids))
        latencies = [
            (e.ready_at - datetime.fromtimestamp(submitted[e.public_id], tz=UTC)).total_seconds()
            for e in envs
            if e.status == "READY" and e.ready_at
        ]
        created = Environment.objects.filter(name__startswith=f"{run}-").count()
        targets = [f"portal.environment:{i}" for i in ids]
        readied = Counter(
            OutboxEvent.objects.filter(
                target__in=targets, action="portal.environment.readied"
            ).values_list("target", flat=True)
        )
        readied.update(
            ChainEvent.objects.filter(
                target__in=targets, action="portal.environment.readied"
            ).values_list("target", flat=True)
        )
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
        deadline = time.time() + 60
        while time.time() < deadline:
            if not Environment.objects.filter(
                public_id__in=self.finished, status="TEARING_DOWN"
            ).exists():
                break
            time.sleep(0.5)


def queue_length() -> int:
    """Messages waiting in the default task queue of the broker."""
    from kiln.celery import app

    with app.connection_for_write() as conn:
        _, count, _ = conn.default_channel.queue_declare(
            queue=app.conf.task_default_queue, passive=True
        )
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
    return prefork_worker_service("provision-bench", concurrency, environment, loglevel="INFO")
