"""How long waking takes on the simulated cluster, in wall-clock seconds, with its realistic delays.

Environments of three shapes (a namespace only; with a spot NodePool; with a Kamaji control
plane) are provisioned, each gets the team's own Deployment (3 replicas), and then, round after
round, all are put to sleep and woken together through the services a person calls, their
pipelines driven as the tasks would (a pass every `poll` seconds). A wake's time is the
pipeline's own record: request to READY (`last_wake_seconds`). Each round also checks that
waking restored exactly the replicas and composed specs sleeping changed.

The simulated cluster's delays are the realistic profile's (kiln.cluster.simulated_failures:
a TenantControlPlane is ready 20 s after a change of its spec, a NodePool 12 s, a Deployment
8 s). The cluster ticks between passes (workload controllers, kube-scheduler, Karpenter), so a
wake ends with the workloads' pods Running, on nodes launched for it where its pool went to
zero; the report counts those wakes and their p95 apart.
"""

from __future__ import annotations

import random
import secrets
import statistics
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.test import override_settings

from audit.chain.writer import AuditWriter
from kiln.cluster import ref_of
from kiln.cluster.nodes import name_of, node_list, pod_list, pod_node
from kiln.cluster.simulated import SimulatedBackend
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import ENGINEER, Actor
from portal.lifecycle import Status
from portal.models import Environment
from portal.services import (
    environment_provision,
    environment_request_submit,
    environment_teardown,
    environment_teardown_request,
)
from portal.services.queueing import tasks_held
from portal.services.sleep import (
    environment_sleep_advance,
    environment_wake_advance,
    sleep_environment,
    wake_environment,
)
from scheduler import seed
from scheduler.models import InstanceType
from scheduler.simulation import cluster_tick
from scheduler.simulation.demo import deployment

SHAPES: dict[str, dict[str, bool]] = {
    "namespace": {},
    "spot-pool": {"spot_node_pool": True},
    "control-plane": {"tenant_control_plane": True, "database": True},
}
REPLICAS = 3
TIMEOUT = 300.0


def _percentile(values: list[float], q: float) -> float:
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(q * (len(ranked) - 1))))]


def _drive_all(
    service, ids: list[int], *, poll: float, want: str, backend: SimulatedBackend | None = None
) -> dict[int, str]:
    """Pass over every pipeline until each stops answering pending (or TIMEOUT); with `backend`,
    the simulated cluster's controllers, kube-scheduler and Karpenter tick before each pass, as
    their beat task would."""
    results: dict[int, str] = {}
    deadline = time.monotonic() + TIMEOUT
    while len(results) < len(ids) and time.monotonic() < deadline:
        if backend is not None:
            cluster_tick(backend=backend, seconds=poll, rng=random.Random(len(results)), demo=True)
        for env_id in ids:
            if env_id not in results:
                outcome = service(environment_id=env_id)
                if outcome != "pending":
                    results[env_id] = outcome
        if len(results) < len(ids):
            time.sleep(poll)
    return {i: results.get(i, "timeout") for i in ids}


def _owner(slug: str) -> Actor:
    team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": "Sleep bench"})
    user, _ = get_user_model().objects.get_or_create(username=f"{slug}-owner")
    Membership.objects.get_or_create(user=user, team=team)
    return Actor(
        username=user.username,
        roles=frozenset({ENGINEER}),
        teams=frozenset({slug}),
        user_id=user.pk,
    )


def _specs(env: Environment, backend: SimulatedBackend) -> dict[str, Any]:
    live = {}
    for manifest in env.manifests:
        if manifest["kind"] in ("TenantControlPlane", "NodePool"):
            live[manifest["kind"]] = (backend.get(*ref_of(manifest).key) or {}).get("spec")
    return live


def sleep_wake_bench(*, rounds: int, per_shape: int, poll: float) -> dict[str, Any]:
    """Provision, then `rounds` of sleep-all and wake-all; wake and sleep times per shape."""
    slug = f"sleepbench-{secrets.token_hex(2)}"
    actor = _owner(slug)
    backend = SimulatedBackend()
    writer = AuditWriter(block_ms=0)
    with (
        override_settings(KILN_SIM_DELAY_PROFILE="realistic", KILN_SIM_DELAY_SCALE=1.0),
        tasks_held(),
    ):
        if not InstanceType.objects.exists():
            seed.seed_demo()  # the price book Karpenter launches from
        shape_of: dict[int, str] = {}
        for shape, extra in SHAPES.items():
            for i in range(per_shape):
                env, _ = environment_request_submit(
                    actor=actor,
                    data={
                        "team": slug, "name": f"{shape}-{i}", "env_class": "dev",
                        "ttl_hours": 24, "workload_class": "standard", "cpu": 4,
                        "memory_gib": 16, "gpu": 0, "justification": "sleep and wake bench",
                        "tenant_control_plane": False, "spot_node_pool": False, "database": False,
                        **extra,
                    },
                )  # fmt: skip
                shape_of[env.pk] = shape
        ids = list(shape_of)
        provisioned = _drive_all(environment_provision, ids, poll=poll, want="ready")
        ready = [i for i in ids if provisioned[i] == "ready"]
        composed = {}
        for env in Environment.objects.filter(pk__in=ready):
            backend.apply(
                [deployment(namespace=env.namespace, name="app", workload_class="standard",
                            replicas=REPLICAS, cpu="250m", memory="256Mi")],
                field_manager="kubectl-client-side-apply",
            )  # fmt: skip
            composed[env.pk] = _specs(env, backend)
        wakes: dict[str, list[float]] = {s: [] for s in SHAPES}
        sleeps: dict[str, list[float]] = {s: [] for s in SHAPES}
        inexact = failures = 0
        new_node: list[float] = []  # wakes whose pods run on a node launched for the wake
        for _ in range(rounds):
            started = {}
            for env in Environment.objects.filter(pk__in=ready).select_related("team"):
                started[env.pk] = time.monotonic()
                sleep_environment(env, actor=actor, reason="bench")
            asleep = _drive_all(environment_sleep_advance, ready, poll=poll, want="sleeping")
            for env_id, outcome in asleep.items():
                failures += outcome != "sleeping"
                sleeps[shape_of[env_id]].append(time.monotonic() - started[env_id])
            # Karpenter removes the emptied nodes of the pools put to zero before the wake.
            cluster_tick(backend=backend, seconds=poll, demo=True)
            before = {name_of(n) for n in node_list(backend)}
            for env in Environment.objects.filter(pk__in=ready).select_related("team"):
                wake_environment(env, actor=actor, reason="bench")
            woken = _drive_all(
                environment_wake_advance, ready, poll=poll, want="ready", backend=backend
            )
            for env in Environment.objects.filter(pk__in=ready):
                failures += woken[env.pk] != "ready"
                if env.last_wake_seconds is not None:
                    wakes[shape_of[env.pk]].append(env.last_wake_seconds)
                    hosts = {pod_node(p) for p in pod_list(backend, namespace=env.namespace)}
                    if hosts - before - {""}:
                        new_node.append(env.last_wake_seconds)
                app = backend.get("apps/v1", "Deployment", env.namespace, "app")
                exact = (app or {}).get("spec", {}).get("replicas") == REPLICAS and _specs(
                    env, backend
                ) == composed[env.pk]
                inexact += not exact
            writer.run_once()
        for env in Environment.objects.filter(pk__in=ids, status__in=[Status.READY]):
            environment_teardown_request(actor=actor, environment=env, reason="bench done")
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline
            and Environment.objects.filter(
                pk__in=ids, status__in=[Status.EXPIRING, Status.TEARING_DOWN]
            ).exists()
        ):
            for env_id in ids:
                environment_teardown(environment_id=env_id)
            writer.run_once()
            time.sleep(poll)
    every = [w for values in wakes.values() for w in values]
    return {
        "rounds": rounds,
        "environments": {s: per_shape for s in SHAPES},
        "not_provisioned": len(ids) - len(ready),
        "poll_seconds": poll,
        "delay_profile": "realistic",
        "wake_s": {
            shape: {
                "n": len(v),
                "median": round(statistics.median(v), 2) if v else None,
                "p95": round(_percentile(v, 0.95), 2) if v else None,
                "max": round(max(v), 2) if v else None,
            }
            for shape, v in wakes.items()
        },
        "wake_p95_s": round(_percentile(every, 0.95), 2) if every else None,
        "wake_median_s": round(statistics.median(every), 2) if every else None,
        "wakes_needing_new_node": len(new_node),
        "wake_needing_new_node_p95_s": (
            round(_percentile(new_node, 0.95), 2) if new_node else None
        ),
        "wake_ends": "the restored workloads' pods Running on nodes (the cluster ticked between "
        "passes: Karpenter launches for a pool woken from zero)",
        "sleep_median_s": {
            s: round(statistics.median(v), 2) if v else None for s, v in sleeps.items()
        },
        "restored_exactly": (rounds * len(ready)) - inexact,
        "restored_inexactly": inexact,
        "pipeline_failures": failures,
    }
