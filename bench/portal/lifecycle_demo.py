"""The disruption-safety demo: expired environments whose workloads answer real HTTP checks.

N dev environments are provisioned in the simulated cluster, each with one workload whose
behaviour is drawn (seeded) from:

- `none`: declares nothing (torn down at expiry);
- `ok-after-k`: a terminate check answering 503 k times (k in 1..3), then 200;
- `never`: a terminate check that always answers 503 (forced at the hard deadline);
- `hold`: `kiln.dev/do-not-disrupt` with a reason (forced at the hard deadline);
- `hold-without-reason`: an invalid hold, not honoured (torn down at expiry);
- `owner`: the owner defers 30 minutes through the service; a deferral with no reason and one
  past the class maximum are refused first and change nothing.

A local HTTP server (loopback) answers the checks. The clock is simulated: reaper passes every
`--pass-minutes` from the expiry until every environment is DELETED; expiring ones are torn down
between passes. Counts come from the audit chain and the Prometheus counters.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import timedelta
from typing import Any

from django.test.utils import override_settings

from audit.models import ChainEvent
from bench.portal.answering_server import AnsweringServer
from bench.portal.fault_matrix import (
    bench_actor,
    drain_audit,
    run_until_settled,
    submit_environment,
)
from kiln.cluster.models import SimulatedObject
from kiln.cluster.simulated import SimulatedBackend
from kiln.errors import InvalidInput
from portal import conf
from portal import disruption as d
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep
from portal.services.expiry import DEFERRALS, FORCED, environment_defer_teardown
from portal.services.provisioning import environment_provision
from portal.services.queueing import tasks_held
from portal.services.reaper import environments_reap_expired
from portal.services.teardown import environment_teardown
from portal.services.tenant_audit import ARCHIVED as TENANT_ARCHIVED
from portal.services.tenant_cluster import ACK_STEP

TENANT_INCOMPLETE = "portal.environment.tenant_audit_incomplete"

BEHAVIOURS = ("none", "ok-after-k", "never", "hold", "hold-without-reason", "owner")


def _workload(
    env: Environment, behaviour: str, server: AnsweringServer, rng: random.Random
) -> dict:
    path = f"/{env.namespace}/ready-to-terminate"
    annotations: dict[str, str] = {}
    if behaviour == "ok-after-k":
        server.script(path, [503] * rng.randint(1, 3) + [200])
        annotations = {d.TERMINATE_CHECK: path, d.TERMINATE_CHECK_PORT: str(server.port)}
    elif behaviour == "never":
        server.script(path, [503])
        annotations = {d.TERMINATE_CHECK: path, d.TERMINATE_CHECK_PORT: str(server.port)}
    elif behaviour == "hold":
        annotations = {d.DO_NOT_DISRUPT: "end-to-end suite running"}
    elif behaviour == "hold-without-reason":
        annotations = {d.DO_NOT_DISRUPT: ""}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "app", "namespace": env.namespace, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": "app"}}, "template": {}},
    }


def _counter(counter, *labels: str) -> float:
    return counter.labels(*labels)._value.get()


def lifecycle_demo(*, environments: int, seed: int, port: int, pass_minutes: int) -> dict[str, Any]:
    """Run the demo (see the module docstring) and return its counts."""
    rng = random.Random(seed)
    backend = SimulatedBackend()
    lifecycle = conf.class_lifecycle("dev")
    before = {
        "workload": _counter(DEFERRALS, "dev", "workload"),
        "owner": _counter(DEFERRALS, "dev", "owner"),
        "forced": _counter(FORCED, "dev"),
    }
    refused = Counter()
    with (
        AnsweringServer(port) as server,
        tasks_held(),
        override_settings(
            KILN_TERMINATE_CHECK_URL="http://127.0.0.1:{port}{path}", KILN_SIM_DELAY_PROFILE="zero"
        ),
    ):
        envs: dict[int, str] = {}
        for i in range(environments):
            behaviour = (
                BEHAVIOURS[i % len(BEHAVIOURS)] if i < len(BEHAVIOURS) else rng.choice(BEHAVIOURS)
            )
            env = submit_environment(f"demo-{seed}-{i}")
            run_until_settled(environment_provision, env.pk)
            env.refresh_from_db()
            backend.apply([_workload(env, behaviour, server, rng)])
            envs[env.pk] = behaviour
            if behaviour == "owner":
                for minutes, reason in ((30, ""), (int(lifecycle.max_deferral // 60) + 1, "soak")):
                    try:
                        environment_defer_teardown(
                            actor=bench_actor(), environment=env, minutes=minutes, reason=reason
                        )
                    except InvalidInput as exc:
                        refused[next(iter(exc.extra["fields"]))] += 1
                environment_defer_teardown(
                    actor=bench_actor(), environment=env, minutes=30, reason="demo to the customer"
                )
        start = max(Environment.objects.filter(pk__in=envs).values_list("expires_at", flat=True))
        t, passes = start, 0
        end = (
            start + timedelta(seconds=lifecycle.max_deferral) + timedelta(minutes=2 * pass_minutes)
        )
        while t <= end:
            environments_reap_expired(now=t, dry_run=False)
            passes += 1
            for env in Environment.objects.filter(
                pk__in=envs, status__in=[Status.EXPIRING, Status.TEARING_DOWN]
            ):
                run_until_settled(environment_teardown, env.pk)
                drain_audit()
            if not Environment.objects.filter(pk__in=envs).exclude(status=Status.DELETED).exists():
                break
            t += timedelta(minutes=pass_minutes)
        drain_audit()
    targets = {
        f"portal.environment:{e.public_id}": e for e in Environment.objects.filter(pk__in=envs)
    }
    chain = ChainEvent.objects.filter(target__in=targets, action__in=[
        "portal.environment.teardown_deferred", "portal.environment.disruption_forced"])  # fmt: skip
    per: dict[str, Counter] = {b: Counter() for b in BEHAVIOURS}
    deferral_sources: Counter = Counter()
    for event in chain:
        behaviour = envs[targets[event.target].pk]
        if event.action.endswith("teardown_deferred"):
            per[behaviour]["deferrals"] += 1
            deferral_sources[json.loads(event.data)["source"]] += 1
        else:
            per[behaviour]["forced"] += 1
    for env in targets.values():
        per[envs[env.pk]]["environments"] += 1
        per[envs[env.pk]]["deleted"] += env.status == Status.DELETED
    left = SimulatedObject.objects.filter(
        namespace__in=[e.namespace for e in targets.values()]
    ).count()
    tenant = Counter(
        ChainEvent.objects.filter(
            target__in=targets, action__in=[TENANT_ARCHIVED, TENANT_INCOMPLETE]
        ).values_list("action", flat=True)
    )
    acknowledged = ProvisioningStep.objects.filter(
        environment_id__in=envs, name=ACK_STEP, detail__contains="acknowledged by the tenant"
    ).count()
    return {
        "seed": seed,
        "environments": environments,
        "env_class": "dev",
        "class_lifecycle": {"max_deferral_s": lifecycle.max_deferral, "deferral_step_s": lifecycle.deferral_step},
        "reaper_pass_minutes": pass_minutes,
        "reaper_passes": passes,
        "simulated_minutes": round((t - start).total_seconds() / 60, 1),
        "deferrals": sum(deferral_sources.values()),
        "deferrals_by_source": dict(deferral_sources),
        "forced_disruptions": sum(p["forced"] for p in per.values()),
        "metrics_delta": {
            "kiln_portal_teardown_deferrals_total{source=workload}": _counter(DEFERRALS, "dev", "workload") - before["workload"],
            "kiln_portal_teardown_deferrals_total{source=owner}": _counter(DEFERRALS, "dev", "owner") - before["owner"],
            "kiln_portal_forced_disruptions_total": _counter(FORCED, "dev") - before["forced"],
        },
        "bad_deferrals_refused": dict(refused),
        "terminate_checks_answered": sum(len(v) for v in server.requests.values()),
        "deleted": sum(p["deleted"] for p in per.values()),
        "objects_left": left,
        "tenant_audit": {
            "batches_archived": tenant[TENANT_ARCHIVED],
            "teardowns_acknowledged": acknowledged,
            "teardowns_incomplete": tenant[TENANT_INCOMPLETE],
        },
        "by_behaviour": {b: dict(c) for b, c in per.items() if c},
    }  # fmt: skip
