"""Sleeping and waking: the transitions, the pipelines on the simulated cluster (restore exactness,
a crash between steps), refusals that change nothing, and the audit events of every move."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from audit.models import OutboxEvent
from kiln.cluster import ref_of
from kiln.cluster.nodes import name_of, node_list, pod_list, pod_node
from kiln.cluster.simulated import SimulatedBackend
from kiln.cluster.simulated_failures import inject_failure
from kiln.errors import Forbidden, IllegalTransition
from kiln.identity.permissions import system_actor
from portal.lifecycle import TRANSITIONS, Status, is_allowed
from portal.models import Environment, ProvisioningStep
from portal.services import (
    environment_provision,
    environment_request_submit,
    environment_teardown_request,
    pipeline,
)
from portal.services.queueing import tasks_held
from portal.services.sleep import (
    BUDGET,
    SleepForbidden,
    environment_sleep_advance,
    environment_wake_advance,
    sleep_environment,
    wake_environment,
)
from portal.services.sleep_steps import SLEEP, WAKE
from portal.services.steps import SLEEP_STEPS, WAKE_STEPS
from scheduler import seed
from scheduler.models import InstanceType
from scheduler.simulation import cluster_tick
from scheduler.simulation.demo import deployment
from tests.portal.conftest import request_data

pytestmark = pytest.mark.django_db
S = Status


def ready_env(people, capture, **overrides) -> Environment:
    with capture(execute=True):
        env, _ = environment_request_submit(actor=people["alice"], data=request_data(**overrides))
    env.refresh_from_db()
    assert env.status == S.READY, env.status_reason
    return env


def run_workloads(env: Environment, **replicas: int) -> SimulatedBackend:
    """The team's own Deployments in the namespace, applied as kubectl would."""
    backend = SimulatedBackend()
    backend.apply(
        [
            deployment(
                namespace=env.namespace,
                name=name,
                workload_class="standard",
                replicas=n,
                cpu="100m",
                memory="64Mi",
            )
            for name, n in replicas.items()
        ],
        field_manager="kubectl-client-side-apply",
    )
    return backend


def served(env: Environment, *, rounds: int = 4) -> int:
    """Tick the simulated cluster (controllers, kube-scheduler, Karpenter) and advance the wake
    until it serves; -> the ticks it took."""
    if not InstanceType.objects.exists():
        seed.seed_demo()
    backend = SimulatedBackend()
    for n in range(1, rounds + 1):
        cluster_tick(backend=backend, seconds=0.0, rng=random.Random(n), demo=True)
        environment_wake_advance(environment_id=env.pk)
        env.refresh_from_db()
        if env.status == S.READY:
            return n
    env.refresh_from_db()
    raise AssertionError(f"not serving after {rounds} ticks: {env.status_reason}")


def replicas(backend: SimulatedBackend, env: Environment, name: str) -> int:
    return backend.get("apps/v1", "Deployment", env.namespace, name)["spec"]["replicas"]


def actions(env: Environment) -> list[str]:
    return list(
        OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}")
        .order_by("id")
        .values_list("action", flat=True)
    )


# --- the transition table ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "target", "allowed"),
    [
        (S.READY, S.SLEEPING, True),
        (S.SLEEPING, S.WAKING, True),
        (S.WAKING, S.READY, True),
        (S.SLEEPING, S.EXPIRING, True),  # the TTL keeps running while asleep
        (S.SLEEPING, S.FAILED, True),
        (S.WAKING, S.FAILED, True),
        (S.SLEEPING, S.READY, False),  # only through WAKING, which restores what sleep changed
        (S.WAKING, S.SLEEPING, False),
        (S.PROVISIONING, S.SLEEPING, False),
        (S.TEARING_DOWN, S.WAKING, False),
        (S.EXPIRING, S.WAKING, False),
    ],
    ids=lambda v: getattr(v, "value", str(v)),
)
def test_the_table_has_sleep_and_wake_and_their_ways_out(current, target, allowed):
    assert is_allowed(current, target) is allowed


def test_no_sleeping_or_waking_environment_is_without_a_way_to_teardown():
    for state in (S.SLEEPING, S.WAKING):
        assert S.FAILED in TRANSITIONS[state]  # and FAILED -> TEARING_DOWN
    assert S.TEARING_DOWN in TRANSITIONS[S.FAILED]


def test_the_pipelines_are_the_step_lists_the_pages_show():
    assert SLEEP.step_names == SLEEP_STEPS
    assert WAKE.step_names == WAKE_STEPS


# --- sleep and wake end to end -------------------------------------------------------------


def test_sleep_then_wake_restores_exactly_the_replicas_control_plane_and_pool(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(
        people, django_capture_on_commit_callbacks, tenant_control_plane=True, spot_node_pool=True
    )
    backend = run_workloads(env, web=3, worker=1, idle=0)
    composed = {m["kind"]: m for m in env.manifests}
    with django_capture_on_commit_callbacks(execute=True):
        sleep_environment(env, actor=people["alice"], reason="night")
    env.refresh_from_db()
    assert env.status == S.SLEEPING and env.slept_at is not None
    assert (replicas(backend, env, "web"), replicas(backend, env, "worker")) == (0, 0)
    assert replicas(backend, env, "idle") == 0
    tcp = backend.get(*ref_of(composed["TenantControlPlane"]).key)
    assert tcp["spec"]["controlPlane"]["deployment"]["replicas"] == 0
    assert backend.health(ref_of(composed["TenantControlPlane"])).status == "Progressing"
    pool = backend.get(*ref_of(composed["NodePool"]).key)
    assert pool["spec"]["limits"] == {"cpu": "0", "memory": "0Gi"}
    assert backend.tenant(namespace=env.namespace, name=env.namespace) is None
    # The namespace, its quota and the Secrets are kept.
    assert backend.get("v1", "Namespace", None, env.namespace) is not None

    with django_capture_on_commit_callbacks(execute=True):
        wake_environment(env, actor=people["alice"], reason="morning")
    env.refresh_from_db()
    # Every object is healthy at once, but no pod runs until the pool has nodes again.
    assert env.status == S.WAKING, env.status_reason
    assert served(env) >= 1
    env.refresh_from_db()
    assert env.status == S.READY and env.slept_at is None
    pool_nodes = {name_of(n) for n in node_list(backend, nodepool=f"kiln-{env.namespace}")}
    web_pods = [p for p in pod_list(backend, namespace=env.namespace) if "web" in name_of(p)]
    assert pool_nodes and web_pods and all(pod_node(p) in pool_nodes for p in web_pods)
    assert env.last_wake_seconds is not None and env.woke_at is not None
    assert [replicas(backend, env, n) for n in ("web", "worker", "idle")] == [3, 1, 0]
    for kind in ("TenantControlPlane", "NodePool"):
        live = backend.get(*ref_of(composed[kind]).key)
        assert live["spec"] == composed[kind]["spec"], kind
    assert backend.tenant(namespace=env.namespace, name=env.namespace) is not None
    moves = [a for a in actions(env) if a != "portal.provisioning_step.completed"]
    assert moves[-4:] == [
        "portal.environment.sleep_started",
        "portal.environment.asleep",
        "portal.environment.wake_started",
        "portal.environment.readied",
    ]
    started = OutboxEvent.objects.get(
        target=f"portal.environment:{env.public_id}", action="portal.environment.sleep_started"
    )
    assert (started.actor, started.data["trigger"], started.data["reason"]) == (
        "alice",
        "owner",
        "night",
    )


def test_a_second_round_sleeps_and_wakes_again_from_fresh_steps(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    backend = run_workloads(env, web=2)
    for _ in range(2):
        env.refresh_from_db()
        with django_capture_on_commit_callbacks(execute=True):
            sleep_environment(env, actor=people["alice"])
        assert replicas(backend, env, "web") == 0
        with tasks_held():  # the cluster's ticks, not the worker's polls, bring it up
            wake_environment(env, actor=people["alice"])
        served(env)
        assert replicas(backend, env, "web") == 2
    counted = Counter(actions(env))
    assert counted["portal.environment.asleep"] == 2
    assert counted["portal.environment.readied"] == 3  # provisioning, then two wakes


class Killed(BaseException):
    """A worker dying mid-pass."""


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("chain_emptied_afterwards")
def test_a_crash_between_sleep_steps_resumes_and_still_restores_the_replicas(people, monkeypatch):
    """The worker dies after scaling to zero, before recording it: the next pass scales again
    (to zero: no change) from the replicas remembered before the first scale, not the zeros."""
    with tasks_held():
        env, _ = environment_request_submit(actor=people["alice"], data=request_data())
        assert environment_provision(environment_id=env.pk) == "ready"
        env.refresh_from_db()
        backend = run_workloads(env, web=4)
        sleep_environment(env, actor=people["alice"])
    real = pipeline.step_done

    def dying(**kwargs):
        if kwargs["name"] == "sleep-workloads":
            raise Killed
        return real(**kwargs)

    monkeypatch.setattr(pipeline, "step_done", dying)
    with pytest.raises(Killed):
        environment_sleep_advance(environment_id=env.pk)
    assert replicas(backend, env, "web") == 0
    steps = dict(ProvisioningStep.objects.filter(environment=env).values_list("name", "status"))
    assert (steps["sleep-remember"], steps["sleep-workloads"]) == ("done", "running")

    monkeypatch.setattr(pipeline, "step_done", real)
    with tasks_held():
        assert environment_sleep_advance(environment_id=env.pk) == "sleeping"
        env.refresh_from_db()
        assert env.sleep_memory["workloads"][0]["replicas"] == 4
        wake_environment(env, actor=people["alice"])
        assert served(env) >= 1
    assert replicas(backend, env, "web") == 4
    assert Counter(actions(env))["portal.environment.asleep"] == 1


def test_a_wake_asked_for_while_falling_asleep_starts_once_asleep(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    backend = run_workloads(env, web=2)
    with tasks_held():
        sleep_environment(env, actor=people["alice"])
        wake_environment(env, actor=people["alice"])  # still falling asleep: kept
        env.refresh_from_db()
        assert env.status == S.SLEEPING and env.wake_requested_at is not None
        assert environment_sleep_advance(environment_id=env.pk) == "sleeping"
        env.refresh_from_db()
        assert env.status == S.WAKING
        assert served(env) >= 1
    assert replicas(backend, env, "web") == 2
    assert "portal.environment.wake_requested" in actions(env)


# --- refusals change nothing ----------------------------------------------------------------


def test_sleeping_a_class_that_may_not_sleep_is_refused_naming_the_rule(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    Environment.objects.filter(pk=env.pk).update(env_class="prod")
    env.refresh_from_db()
    before = actions(env)
    with pytest.raises(SleepForbidden) as caught:
        sleep_environment(env, actor=people["alice"])
    assert caught.value.extra["rule"] == "may_sleep"
    env.refresh_from_db()
    assert env.status == S.READY and actions(env) == before


def test_sleeping_a_not_ready_environment_and_waking_one_torn_down_are_refused(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    with tasks_held():
        environment_teardown_request(actor=people["alice"], environment=env)
    env.refresh_from_db()
    before = actions(env)
    with pytest.raises(IllegalTransition):
        sleep_environment(env, actor=people["alice"])
    with pytest.raises(IllegalTransition) as caught:
        wake_environment(env, actor=people["alice"])
    assert caught.value.extra["from"] == S.EXPIRING
    env.refresh_from_db()
    assert env.status == S.EXPIRING and actions(env) == before


def test_only_the_owning_team_and_the_sleeper_may_sleep_it(
    people, django_capture_on_commit_callbacks
):
    env = ready_env(people, django_capture_on_commit_callbacks)
    for outsider in (people["bob"], people["carol"], system_actor("provisioner")):
        with pytest.raises(Forbidden):
            sleep_environment(env, actor=outsider)
    assert Environment.objects.get(pk=env.pk).status == S.READY
    with tasks_held():
        sleep_environment(env, actor=system_actor("sleeper"), trigger=BUDGET)
    assert Environment.objects.get(pk=env.pk).sleep_trigger == BUDGET


def test_the_owner_can_tear_down_a_sleeping_environment(people, django_capture_on_commit_callbacks):
    env = ready_env(people, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        sleep_environment(env, actor=people["alice"])
    env.refresh_from_db()
    with tasks_held() as held, django_capture_on_commit_callbacks(execute=True):
        environment_teardown_request(actor=people["alice"], environment=env, reason="done")
    assert Environment.objects.get(pk=env.pk).status == S.EXPIRING
    assert held == [("portal.teardown_environment", env.pk)]


def test_a_wake_that_does_not_serve_within_the_timeout_fails_and_one_degraded_fails_at_once(
    people, django_capture_on_commit_callbacks, settings
):
    """The control plane never becomes ready again: the wake waits, and past
    KILN_WAKE_TIMEOUT_SECONDS from its request the environment is FAILED, the step named."""
    env = ready_env(people, django_capture_on_commit_callbacks, tenant_control_plane=True)
    with django_capture_on_commit_callbacks(execute=True):
        sleep_environment(env, actor=people["alice"])
    inject_failure("never_ready", kind="TenantControlPlane")
    env.refresh_from_db()
    with tasks_held():
        wake_environment(env, actor=people["alice"])
        assert environment_wake_advance(environment_id=env.pk) == "pending"
        assert Environment.objects.get(pk=env.pk).status == S.WAKING
        settings.KILN_WAKE_TIMEOUT_SECONDS = 0
        assert environment_wake_advance(environment_id=env.pk) == "failed"
    stored = Environment.objects.get(pk=env.pk)
    assert stored.status == S.FAILED and "not awake within" in stored.status_reason
    assert "TenantControlPlane" in stored.status_reason
    step = ProvisioningStep.objects.get(environment=env, name="wake-ready")
    assert step.status == ProvisioningStep.FAILED


def test_the_simulated_cluster_runs_no_control_plane_pods_for_a_sleeping_environment(
    people, django_capture_on_commit_callbacks
):
    """Kamaji's Deployment of a sleeping control plane (in kiln-management) follows it to zero
    replicas, and back to the composed count on waking."""
    from scheduler.simulation.demo import MANAGEMENT_NAMESPACE, demo_cluster_reconcile

    env = ready_env(people, django_capture_on_commit_callbacks, tenant_control_plane=True)
    backend = SimulatedBackend()
    demo_cluster_reconcile(backend=backend, seed_workloads=False)
    name = f"tcp-{env.namespace}-{env.namespace}"

    def plane() -> int:
        return backend.get("apps/v1", "Deployment", MANAGEMENT_NAMESPACE, name)["spec"]["replicas"]

    assert plane() == 2
    with django_capture_on_commit_callbacks(execute=True):
        sleep_environment(env, actor=people["alice"])
    demo_cluster_reconcile(backend=backend, seed_workloads=False)
    assert plane() == 0
    env.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        wake_environment(env, actor=people["alice"])
    demo_cluster_reconcile(backend=backend, seed_workloads=False)
    assert plane() == 2
