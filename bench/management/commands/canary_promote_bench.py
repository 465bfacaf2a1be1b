"""End-to-end rollout throughput: N rollouts through the API, Celery, the database and the
simulated cluster until promoted; prints JSON (wall time, rollouts per second).

The worker has the production shape by default: a separate `celery -A kiln worker
--pool prefork --concurrency 2` process (what `make dev` runs) on the configured broker.
`--worker threads` runs an in-process thread pool instead (the only choice on the
memory transport, i.e. standalone mode).

`--kube-api local` runs every process on the `kubernetes` backend, the official client over
HTTP to a simulated API server on loopback (tests/support/kube_sim.py) instead of the
simulated cluster, and reports the requests each client process made against its client
limits (KILN_KUBE_QPS, KILN_KUBE_BURST; `--kube-qps` for this run): whether client throttling
shapes the time, the case study's lesson.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections import Counter
from contextlib import ExitStack

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings
from rest_framework.test import APIClient

from audit.models import ChainEvent
from bench.database import database_url
from bench.waiting import wait_until
from canary.models import Rollout, RolloutDecision, RolloutStatus, RolloutTick
from canary.ownership import TEAM_LABEL
from canary.services import analysis_config
from kiln import benchjson
from kiln.cluster.backends import get_backend
from kiln.identity.permissions import system_actor
from kiln.identity.services import team_create
from kiln.standalone import (
    Service,
    audit_writer_service,
    celery_worker_service,
    prefork_worker_service,
    services_together,
)
from tests.support.kube_sim import SimulatedKubeAPI

# Promotion needs evidence, and the rollouts are judged as a user's are: the defaults of
# AnalysisConfig (tail at the pooled p99.5) and of a rollout (one warm-up tick). The simulated
# services are busy (2,000 requests/s, 120,000 a tick): one tick at an even split carries
# ~600 requests above the pooled p99.5, so a healthy canary is accepted on every channel in
# its first or second tick of evidence (start, warm-up, decision: three tasks per rollout).
TRAFFIC_CLASS = "busy"
ANALYSIS: dict = {}


class Command(BaseCommand):
    help = "Drive N healthy rollouts end to end (API -> Celery -> DB -> simulated cluster) to promotion."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rollouts", type=int, default=1000)
        parser.add_argument(
            "--worker",
            choices=["prefork", "threads"],
            default=None,
            help="prefork (default on a shared broker): a separate worker process pool, as "
            "`make dev` runs it; threads: an in-process thread pool",
        )
        parser.add_argument(
            "--concurrency", type=int, default=2, help="worker processes (or threads)"
        )
        parser.add_argument(
            "--namespaces",
            type=int,
            default=1,
            help="spread the services over this many namespaces (1: all in one namespace)",
        )
        parser.add_argument("--timeout", type=float, default=600.0)
        parser.add_argument(
            "--kube-api",
            choices=["none", "local"],
            default="none",
            help="local: the kubernetes backend against a simulated API server on loopback",
        )
        parser.add_argument("--kube-api-port", type=int, default=0, help="0: any free port")
        parser.add_argument(
            "--kube-qps", type=float, default=None, help="KILN_KUBE_QPS for this run (0: no limit)"
        )
        parser.add_argument("--json", action="store_true", help="print the JSON report (default)")

    def handle(self, *args, **options) -> None:
        if options["rollouts"] < 1:
            raise CommandError("--rollouts must be at least 1")
        with ExitStack() as stack:
            api, environment = None, {}
            if options["kube_api"] == "local":
                api = SimulatedKubeAPI(port=options["kube_api_port"]).start()
                stack.callback(api.stop)
                environment = {"KILN_DELIVERY_BACKEND": "kubernetes", "KILN_KUBE_API_URL": api.url}
                if options["kube_qps"] is not None:
                    environment["KILN_KUBE_QPS"] = str(options["kube_qps"])
                stack.enter_context(
                    override_settings(
                        KILN_DELIVERY_BACKEND="kubernetes", KILN_KUBE_API_URL=api.url,
                        KILN_KUBE_TOKEN_FILE=None, KILN_KUBE_CA_FILE=None,
                        KILN_KUBE_QPS=float(environment.get("KILN_KUBE_QPS", settings.KILN_KUBE_QPS)),
                    )
                )  # fmt: skip
            report = self._run(options, environment)
            if api is not None:
                report["kube_api"] = kube_report(api, report.pop("_window"))
            else:
                report.pop("_window")
        self.stdout.write(json.dumps(report, indent=2))

    def _run(self, options: dict, environment: dict[str, str]) -> dict:
        started_at = benchjson.now()
        n = options["rollouts"]
        namespaces = max(1, min(options["namespaces"], n))
        tag = uuid.uuid4().hex[:8]
        team = team_create(
            actor=system_actor("canary-bench"), slug=f"bench-{tag}", name=f"Bench {tag}"
        )
        user = get_user_model().objects.create_user(f"bench-{tag}", is_superuser=True)
        client = APIClient()
        client.force_authenticate(user)
        # The bench team's namespaces, labelled as a provisioned environment's would be.
        get_backend().apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": f"bench-{tag}-{j}", "labels": {TEAM_LABEL: team.slug}},
                }
                for j in range(namespaces)
            ]
        )
        service_ids = []
        for i in range(n):
            response = client.post(
                "/api/v1/canary/services/",
                {
                    "team": team.slug,
                    "name": f"svc-{i}",
                    "namespace": f"bench-{tag}-{i % namespaces}",
                    "sim_traffic_class": TRAFFIC_CLASS,
                },
                format="json",
            )
            if response.status_code != 201:
                raise CommandError(f"service create failed: {response.content[:300]!r}")
            service_ids.append(response.json()["id"])
        shared_broker = settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://", "amqp://"))
        pool = options["worker"] or ("prefork" if shared_broker else "threads")
        if pool == "prefork" and not shared_broker:
            raise CommandError("--worker prefork needs a broker other processes see (REDIS_URL)")
        if pool == "prefork":
            worker = prefork_worker(options["concurrency"], environment)
        else:
            worker = celery_worker_service(concurrency=options["concurrency"])
        worker.start()
        load_before = os.getloadavg()
        try:
            started = time.perf_counter()
            window = [time.monotonic(), 0.0]
            ids = []
            for service_id in service_ids:
                response = client.post(
                    "/api/v1/rollouts/",
                    {
                        "service": service_id,
                        "baseline_version": "v1",
                        "canary_version": "v2",
                        "steps": [50, 100],
                        "ticks_per_step": 2,
                        "tick_seconds": 0.2,
                        "config": ANALYSIS,
                    },
                    format="json",
                )
                if response.status_code != 201:
                    raise CommandError(f"rollout create failed: {response.content[:300]!r}")
                ids.append(response.json()["id"])
            created = time.perf_counter() - started
            active = Rollout.objects.filter(
                pk__in=ids, status__in=[RolloutStatus.PENDING, RolloutStatus.RUNNING]
            )
            wait_until(
                lambda: not active.exists(),
                timeout=max(0.0, started + options["timeout"] - time.perf_counter()),
                stated_timeout=options["timeout"],
                poll=0.2,
                what=lambda: (
                    f"{active.count()} of {n} rollouts were still pending or running "
                    "(is the worker consuming the broker?)"
                ),
            )
            wall = time.perf_counter() - started
            window[1] = time.monotonic()
            # The audit writer runs beside the worker: before both stop, let the chain take
            # every decision the rollouts recorded (counted apart from the wall time).
            decisions = RolloutDecision.objects.filter(rollout_id__in=ids)
            decided = decisions.count()
            # Each decision is audited as canary.rollout.<kind>.
            kinds = set(decisions.values_list("kind", flat=True).distinct())
            chained = ChainEvent.objects.filter(
                action__in=[f"canary.rollout.{kind}" for kind in kinds],
                target__in=[f"canary.rollout:{pk}" for pk in ids],
            )
            wait_until(
                lambda: chained.count() >= decided,
                timeout=max(10.0, started + options["timeout"] - time.perf_counter()),
                stated_timeout=options["timeout"],
                poll=0.2,
                what=lambda: f"{chained.count()} of {decided} decisions reached the audit chain",
            )
            audit_lag = time.perf_counter() - started - wall
        finally:
            worker.stop()
        outcome = dict.fromkeys(RolloutStatus.values, 0)
        for status in Rollout.objects.filter(pk__in=ids).values_list("status", flat=True):
            outcome[status] += 1
        ticks = RolloutTick.objects.filter(rollout_id__in=ids).count()
        report = {
            "rollouts": n,
            "outcomes": outcome,
            "traffic_class": TRAFFIC_CLASS,
            "analysis_config": ANALYSIS,
            "analysis_config_resolved": _resolved_config(ids[0]),
            "ticks_per_rollout": round(ticks / n, 2),
            "namespaces": namespaces,
            "tasks": n + ticks,
            "worker": pool,
            "worker_concurrency": options["concurrency"],
            "broker": settings.CELERY_BROKER_URL.split("://", 1)[0],
            "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
            # Off: audit outbox rows are published by the relay's periodic sweep instead of
            # one wake-up task per commit (KILN_AUDIT_RELAY_ON_COMMIT).
            "audit_relay_on_commit": settings.KILN_AUDIT_RELAY_ON_COMMIT,
            "api_create_seconds": round(created, 2),
            "wall_seconds": round(wall, 2),
            "audit_chain_caught_up_after_seconds": round(audit_lag, 2),
            "rollouts_per_second": round(n / wall, 1),
            "backend": settings.KILN_DELIVERY_BACKEND,
            "target_seconds": 60,
            "cpus": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        }
        report = benchjson.stamped(report, name="canary_promote_bench", date=started_at)
        return {**report, "_window": window}


def _resolved_config(rollout_id: str) -> dict:
    """The AnalysisConfig a bench rollout ran with (defaults, its steps, no overrides)."""
    return dataclasses.asdict(analysis_config(Rollout.objects.get(pk=rollout_id)))


def _database_url() -> str:
    """The database this process uses (under test, the test database) as a URL for the worker."""
    url = database_url()
    if url is None:
        raise CommandError("--worker prefork needs PostgreSQL (a database other processes see)")
    return url


def kube_report(api: SimulatedKubeAPI, window: list[float]) -> dict:
    """What the API server served between the first rollout and the last decision, per client
    process (its `Kiln-Process` header names its pid), against the client limits.

    A process's token bucket lets `burst + qps * t` requests through in `t` seconds, so `n`
    requests need at least `(n - burst) / qps` seconds: the throttle floor. Throttling shapes
    the time when some process's floor is half the wall time or more (its requests waited on
    the bucket, not on the server); `seconds_at_qps` counts the seconds in which a process made
    at least 90% of `qps` requests.
    """
    qps, burst = float(settings.KILN_KUBE_QPS), int(settings.KILN_KUBE_BURST)
    start, end = window
    wall = max(end - start, 1e-9)
    served = [r for r in api.requests if start <= r["at"] <= end]
    clients: dict[str, dict] = {}
    for pid in sorted({r["process"] for r in served}):
        at = [r["at"] for r in served if r["process"] == pid]
        per_second = Counter(int(t - start) for t in at)
        clients[pid] = {
            "requests": len(at),
            "requests_per_second": round(len(at) / wall, 1),
            "peak_requests_in_a_second": max(per_second.values()),
            "seconds_at_qps": sum(1 for c in per_second.values() if qps and c >= 0.9 * qps),
            "throttle_floor_seconds": round(max(0.0, len(at) - burst) / qps, 2) if qps else 0.0,
        }
    floor = max((c["throttle_floor_seconds"] for c in clients.values()), default=0.0)
    return {
        "url": api.url,
        "client_limits": {"qps": qps, "burst": burst, "pool_size": settings.KILN_KUBE_POOL_SIZE},
        "requests": len(served),
        "by_method": dict(Counter(r["method"] for r in served)),
        "requests_per_second": round(len(served) / wall, 1),
        "clients": clients,
        "this_process_throttled_seconds": round(get_backend().rate_limit.throttled_seconds, 2),
        "throttle_floor_seconds": floor,
        "window_seconds": round(wall, 2),
        "throttling_shapes_time": bool(qps) and floor >= 0.5 * wall,
    }


def prefork_worker(concurrency: int, extra: dict[str, str] | None = None) -> Service:
    """A separate `celery -A kiln worker --pool prefork` process and an `audit_writer` on this
    database and broker, as `make dev` runs them (`extra`: more of their environment)."""
    environment = {"DATABASE_URL": _database_url(), **(extra or {})}
    return services_together(
        audit_writer_service("canary-bench", environment),
        prefork_worker_service("canary-bench", concurrency, environment),
    )
