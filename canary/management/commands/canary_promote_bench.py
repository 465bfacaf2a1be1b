"""End-to-end rollout throughput: N rollouts through the API, Celery, the database and the
simulated cluster until promoted; prints JSON (wall time, rollouts per second)."""

from __future__ import annotations

import json
import time
import uuid

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.test import APIClient

from canary.models import Rollout, RolloutStatus
from kiln.identity.permissions import system_actor
from kiln.identity.services import team_create
from kiln.standalone import celery_worker_service


class Command(BaseCommand):
    help = "Drive N healthy rollouts end to end (API -> Celery -> DB -> simulated cluster) to promotion."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rollouts", type=int, default=1000)
        parser.add_argument("--concurrency", type=int, default=4, help="in-process worker threads")
        parser.add_argument("--timeout", type=float, default=600.0)
        parser.add_argument("--json", action="store_true", help="print the JSON report (default)")

    def handle(self, *args, **options) -> None:
        n = options["rollouts"]
        if n < 1:
            raise CommandError("--rollouts must be at least 1")
        tag = uuid.uuid4().hex[:8]
        team = team_create(
            actor=system_actor("canary-bench"), slug=f"bench-{tag}", name=f"Bench {tag}"
        )
        user = get_user_model().objects.create_user(f"bench-{tag}", is_superuser=True)
        client = APIClient()
        client.force_authenticate(user)
        service_ids = []
        for i in range(n):
            response = client.post(
                "/api/v1/canary/services/",
                {"team": team.slug, "name": f"svc-{i}", "namespace": f"bench-{tag}"},
                format="json",
            )
            if response.status_code != 201:
                raise CommandError(f"service create failed: {response.content[:300]!r}")
            service_ids.append(response.json()["id"])
        worker = celery_worker_service(concurrency=options["concurrency"])
        worker.start()
        try:
            started = time.perf_counter()
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
                    },
                    format="json",
                )
                if response.status_code != 201:
                    raise CommandError(f"rollout create failed: {response.content[:300]!r}")
                ids.append(response.json()["id"])
            created = time.perf_counter() - started
            deadline = started + options["timeout"]
            while True:
                active = Rollout.objects.filter(
                    pk__in=ids, status__in=[RolloutStatus.PENDING, RolloutStatus.RUNNING]
                ).count()
                if active == 0 or time.perf_counter() > deadline:
                    break
                time.sleep(0.2)
            wall = time.perf_counter() - started
        finally:
            worker.stop()
        outcome = dict.fromkeys(RolloutStatus.values, 0)
        for status in Rollout.objects.filter(pk__in=ids).values_list("status", flat=True):
            outcome[status] += 1
        report = {
            "rollouts": n,
            "outcomes": outcome,
            "ticks_per_rollout": 2,
            "tasks": n * 3,
            "worker_threads": options["concurrency"],
            "broker": settings.CELERY_BROKER_URL.split("://", 1)[0],
            "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
            # Off: audit outbox rows are published by the relay's periodic sweep instead of
            # one wake-up task per commit (KILN_AUDIT_RELAY_ON_COMMIT).
            "audit_relay_on_commit": settings.KILN_AUDIT_RELAY_ON_COMMIT,
            "api_create_seconds": round(created, 2),
            "wall_seconds": round(wall, 2),
            "rollouts_per_second": round(n / wall, 1),
            "target_seconds": 60,
        }
        self.stdout.write(json.dumps(report, indent=2))
