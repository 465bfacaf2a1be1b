"""A month of simulated use, priced three ways: TTL only, idle teardown, and sleep and wake.

The lifecycle demo's setting (the simulated cluster, services driven to completion, a reaper
run by the clock) stretched to a month on a controlled clock: `django.utils.timezone.now`
returns the simulated instant, so every service, audit event and simulated object reads it.
The simulated cluster runs its "realistic" readiness delays (a NodePool takes 12 s), and the
clock advances one second per poll while anything waits, so a wake takes simulated seconds.

People (seeded, bench/portal/spend_model.py: who works when): each asks for a dev environment
(TTL 168 h) through the API (the real URL stack, Django's test client) when a session starts and
they have none alive, and works in it: every hour of a session their own field manager applies
a ConfigMap in its namespace (the activity evidence Kiln reads).

Policies, each the same people on the same seed, on the same services:

- `ttl_only`: the reaper's expiry alone (environments_expire_due);
- `idle_teardown`: plus the idle proposal and its early expiry (environments_warn_and_propose);
- `sleep_wake`: the whole reaper pass, which also sleeps inactive environments (the class's
  `sleep_after`); an owner coming back to a sleeping one wakes it (wake_environment).

How spend is priced (node-hours) and when an environment counts as lost: spend_model. A wake
"needed a new node" when its pods landed on a node that was not up when the wake was asked for.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.test.utils import override_settings

from bench.portal.fault_matrix import drain_audit
from bench.portal.spend_model import (
    MONTH_END,
    MONTH_START,
    TICK,
    TTL_HOURS,
    Clock,
    Tracked,
    node_hours,
    people,
    was_lost,
)
from kiln.cluster.nodes import name_of, node_list, pod_list, pod_node
from kiln.cluster.simulated import SimulatedBackend
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import ENGINEER, Actor
from portal.lifecycle import Status
from portal.models import Environment
from portal.services.expiry import environments_expire_due
from portal.services.notices import environments_warn_and_propose
from portal.services.provisioning import PENDING, environment_provision
from portal.services.queueing import tasks_held
from portal.services.reaper import environments_reap_expired
from portal.services.sleep import environment_sleep_advance, environment_wake_advance
from portal.services.sleep import wake_environment as wake_service
from portal.services.teardown import environment_teardown
from scheduler.karpenter import parse_duration
from scheduler.seed import seed_demo
from scheduler.simulation import cluster_tick
from scheduler.simulation.demo import deployment

POLICIES = ("ttl_only", "idle_teardown", "sleep_wake")
USER_MANAGER = "kubectl-client-side-apply"
MAX_POLLS = 1800  # simulated seconds a pipeline may wait before the demo calls it stuck


@dataclass
class Run:
    policy: str
    seed: int
    clock: Clock
    client: Client
    team: str
    tracked: dict[int, Tracked] = field(default_factory=dict)
    current: dict[int, int] = field(default_factory=dict)  # person -> environment id
    wakes: list[float] = field(default_factory=list)
    wakes_new_node: int = 0
    created: int = 0
    stuck: int = 0
    # Names are unique per run: a run repeated on the same database meets its earlier one's.
    tag: str = field(default_factory=lambda: secrets.token_hex(3))


def _drive(run: Run, service, env_id: int, *, tick: bool = False) -> str:
    """Run a re-entrant service until it stops answering pending, one simulated second a poll;
    with `tick`, the simulated cluster's controllers, kube-scheduler and Karpenter run once a
    poll, as their beat task would (a wake waits for its pods to run)."""
    for _ in range(MAX_POLLS):
        result = service(environment_id=env_id)
        if result != PENDING:
            return result
        drain_audit()  # teardown waits for its final event in the chain, as the writer makes it
        run.clock.advance(1)
        if tick:
            cluster_tick(backend=SimulatedBackend(), seconds=1.0, demo=False)
    run.stuck += 1
    return PENDING


def _setup(policy: str, seed: int, persons: int) -> tuple[str, list[Client]]:
    """A team for this policy and seed, and one signed-in engineer (a session) per person."""
    slug = f"spend-{policy.replace('_', '')[:8]}-{seed}"
    team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": f"Spend {policy} {seed}"})
    group, _ = Group.objects.get_or_create(name=ENGINEER)
    clients = []
    for i in range(persons):
        user, _ = get_user_model().objects.get_or_create(username=f"{slug}-p{i}")
        user.groups.add(group)
        Membership.objects.get_or_create(user=user, team=team)
        clients.append(Client())
    return slug, clients


def _create(run: Run, person: int, clients: list[Client]) -> None:
    """The person asks for a dev environment through the API and it is provisioned."""
    run.created += 1
    body = {
        "team": run.team, "name": f"p{person}-{run.created}-{run.tag}", "env_class": "dev",
        "ttl_hours": TTL_HOURS, "workload_class": "standard", "cpu": 4, "memory_gib": 16,
        "spot_node_pool": True, "justification": "a month of simulated use",
    }  # fmt: skip
    client = clients[person]
    # Signed in now, on the simulated clock: a session from before would have expired by then.
    client.force_login(get_user_model().objects.get(username=f"{run.team}-p{person}"))
    response = client.post("/api/v1/environments/", body, content_type="application/json")
    if response.status_code != 201:
        raise RuntimeError(f"request refused: {response.status_code} {response.content[:300]!r}")
    env = Environment.objects.get(public_id=response.json()["id"])
    _drive(run, environment_provision, env.pk)
    env.refresh_from_db()
    pool = next((m for m in env.manifests if m.get("kind") == "NodePool"), {})
    consolidate = parse_duration(pool.get("spec", {}).get("disruption", {}).get("consolidateAfter"))
    run.tracked[env.pk] = Tracked(
        env.pk,
        person,
        run.clock.now,
        env.hourly_cost,
        consolidate or 0.0,
        [(run.clock.now, env.status)],
    )
    run.current[person] = env.pk
    # The person's own service in it: the workload sleeping scales to zero and waking restores.
    workload = deployment(namespace=env.namespace, name="app", workload_class="standard",
                          replicas=2, cpu="500m", memory="512Mi")  # fmt: skip
    SimulatedBackend().apply([workload], field_manager=USER_MANAGER)


def _work(run: Run, person: int) -> None:
    """The person changes something in their namespace (Kiln's activity evidence)."""
    env = Environment.objects.get(pk=run.current[person])
    SimulatedBackend().apply(
        [{"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "work", "namespace": env.namespace},
          "data": {"at": run.clock.now.isoformat()}}],
        field_manager=USER_MANAGER,
    )  # fmt: skip


def _start_session(run: Run, person: int, clients: list[Client]) -> None:
    env_id = run.current.get(person)
    status = Environment.objects.filter(pk=env_id).values_list("status", flat=True).first()
    if status not in (Status.READY, Status.SLEEPING, Status.WAKING):
        _create(run, person, clients)  # none yet, or it ended (expired, torn down, failed)
    elif status == Status.SLEEPING:
        env = Environment.objects.get(pk=env_id)
        # The cluster catches up with the sleep (pods gone, emptied nodes consolidated away).
        backend = SimulatedBackend()
        cluster_tick(backend=backend, seconds=0.0, demo=False)
        had = {name_of(n) for n in node_list(backend, nodepool=f"kiln-{env.namespace}")}
        wake_service(env, actor=_owner(run, clients, person), reason="back to work")
        _drive(run, environment_wake_advance, env_id, tick=True)
        env.refresh_from_db()
        if env.status == Status.READY and env.last_wake_seconds is not None:
            run.wakes.append(env.last_wake_seconds)
            hosts = {pod_node(p) for p in pod_list(backend, namespace=env.namespace)}
            run.wakes_new_node += bool(hosts - had - {""})
    _work(run, person)


def _owner(run: Run, clients: list[Client], person: int) -> Actor:
    user = get_user_model().objects.get(username=f"{run.team}-p{person}")
    return Actor(username=user.username, roles=frozenset({ENGINEER}), teams=frozenset({run.team}),
                 user_id=user.pk)  # fmt: skip


def _pass(run: Run) -> None:
    """The policy's reaper pass, then every pipeline it started driven to its end."""
    now = run.clock.now
    if run.policy == "ttl_only":
        environments_expire_due(now=now, dry_run=False)
    elif run.policy == "idle_teardown":
        environments_warn_and_propose(now=now, dry_run=False)
        environments_expire_due(now=now, dry_run=False)
    else:
        environments_reap_expired(now=now, dry_run=False)
    for env in Environment.objects.filter(pk__in=run.tracked).exclude(
        status__in=[Status.READY, Status.SLEEPING, Status.DELETED, Status.FAILED]
    ):
        if env.status in (Status.EXPIRING, Status.TEARING_DOWN):
            _drive(run, environment_teardown, env.pk)
        elif env.status == Status.WAKING:
            _drive(run, environment_wake_advance, env.pk, tick=True)
    # Falling asleep: the sleep pipeline's steps, driven like the task would.
    for env in Environment.objects.filter(
        pk__in=run.tracked, status=Status.SLEEPING, slept_at=None
    ):
        _drive(run, environment_sleep_advance, env.pk)


def _snapshot(run: Run, t: datetime) -> None:
    for env_id, status in Environment.objects.filter(pk__in=run.tracked).values_list(
        "pk", "status"
    ):
        seen = run.tracked[env_id].seen
        if seen[-1][1] != status:
            seen.append((t, status))


def run_policy(*, policy: str, seed: int, persons: int) -> dict[str, Any]:
    """One month of the seed's people under one policy; its spend, wakes and losses."""
    crowd = people(seed, persons)
    slug, clients = _setup(policy, seed, persons)
    clock = Clock(MONTH_START)
    run = Run(policy=policy, seed=seed, clock=clock, client=clients[0], team=slug)
    starts = sorted((s, i) for i, (_, sessions) in enumerate(crowd) for s, _ in sessions)
    t, k = MONTH_START, 0
    with clock.running():
        while t < MONTH_END:
            clock.at_least(t)
            while k < len(starts) and starts[k][0] <= t:
                _start_session(run, starts[k][1], clients)
                k += 1
            if t.minute == 0:
                for person, (_, sessions) in enumerate(crowd):
                    if person in run.current and any(a < t < b for a, b in sessions):
                        _work(run, person)
                _pass(run)
            _snapshot(run, clock.now)
            t += TICK
        clock.at_least(MONTH_END)
        for env in Environment.objects.filter(pk__in=run.tracked).exclude(
            status__in=[Status.DELETED, Status.FAILED]
        ):  # the month is over: hand what is left to teardown, outside the priced window
            Environment.objects.filter(pk=env.pk).update(expires_at=MONTH_END)
        environments_expire_due(now=clock.now, dry_run=False)
        for env_id in run.tracked:
            _drive(run, environment_teardown, env_id)
    return _report(run, crowd)


def _report(run: Run, crowd) -> dict[str, Any]:
    spend = sum((tr.hourly * node_hours(tr) for tr in run.tracked.values()), Decimal(0))
    lost = sum(was_lost(tr, crowd[tr.owner][1]) for tr in run.tracked.values())
    return {
        "spend": spend.quantize(Decimal("0.01")),
        "environments_created": len(run.tracked),
        "environments_lost": lost,
        "wakes": run.wakes,
        "wakes_new_node": run.wakes_new_node,
        "stuck_pipelines": run.stuck,
    }


def spend_month_demo(*, seeds: list[int], persons: int) -> dict[str, Any]:
    """Every policy over every seed; the month's spend per policy summed over the seeds."""
    seed_demo()
    totals = {p: Decimal(0) for p in POLICIES}
    per_seed: dict[str, dict[str, Any]] = {}
    wakes: list[float] = []
    lost = {p: 0 for p in POLICIES}
    extra = {"wakes_new_node": 0, "stuck_pipelines": 0, "environments_created": {}}
    with tasks_held(), override_settings(KILN_SIM_DELAY_PROFILE="realistic"):
        for seed in seeds:
            for policy in POLICIES:
                out = run_policy(policy=policy, seed=seed, persons=persons)
                per_seed.setdefault(str(seed), {})[policy] = {
                    k: v for k, v in out.items() if k != "wakes"
                }
                totals[policy] += out["spend"]
                lost[policy] += out["environments_lost"]
                wakes += out["wakes"]
                extra["wakes_new_node"] += out["wakes_new_node"]
                extra["stuck_pipelines"] += out["stuck_pipelines"]
    ranked = sorted(wakes)
    p95 = ranked[min(len(ranked) - 1, int(0.95 * len(ranked)))] if ranked else None
    base = totals["ttl_only"]
    return {
        "spend": {p: str(v.quantize(Decimal("0.01"))) for p, v in totals.items()},
        "saving_vs_ttl_only": {
            p: round(float(1 - totals[p] / base), 3) if base else None for p in POLICIES[1:]
        },
        "wake_p95_s": p95,
        "wake_median_s": ranked[len(ranked) // 2] if ranked else None,
        "wakes": len(ranked),
        "wakes_needing_new_node": extra["wakes_new_node"],
        "environments_lost": lost["sleep_wake"],
        "environments_lost_by_policy": lost,
        "stuck_pipelines": extra["stuck_pipelines"],
        "seeds": seeds,
        "persons_per_seed": persons,
        "currency": "USD",
        "spend_model": "node-hours priced: an environment holds its NodePool's nodes while READY, "
        "WAKING or being torn down, and for the pool's consolidateAfter after falling asleep; "
        "each hour at its hourly price from the scheduler's price models (spot pool)",
        "wake_model": "measured simulated wakes: seconds on the simulated clock (realistic "
        "profile) from each wake's request to READY, the cluster ticking once a simulated second "
        "(workload controllers, kube-scheduler, Karpenter), so a wake ends when its workload's "
        "pods run on nodes, launched by its own NodePool where the pool had none; "
        "wakes_needing_new_node counts the wakes whose pods landed on a node that was not up "
        "when the wake was asked for",
        "month": f"{MONTH_START:%Y-%m}",
        "per_seed": per_seed,
    }
