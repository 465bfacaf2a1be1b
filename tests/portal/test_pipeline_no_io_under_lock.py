"""No cluster call under a row lock: every call the provisioning, sleep, wake and teardown
pipelines make to the delivery backend (and to a tenant's own API server) happens outside any
transaction, so no `select_for_update` lock is held while the cluster answers (DESIGN.md).

The test runs with real commits (a transactional test), where `connection.in_atomic_block` is
True only inside a transaction the code itself opened."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kiln.cluster.simulated import SimulatedBackend
from portal.lifecycle import Status
from portal.models import Environment
from portal.services import (
    environment_provision,
    environment_request_submit,
    environment_teardown,
    environment_teardown_request,
    provisioning,
    sleep_steps,
    teardown,
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
from tests.portal.conftest import drain_audit, request_data
from tests.support.outside_transactions import OutsideTransactions

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("chain_emptied_afterwards"),
]


def _advance_until(advance, env: Environment, wanted: str, *, rounds: int = 8) -> None:
    """Pass after pass (the cluster ticked, the audit chain written between them) until the
    pipeline says `wanted`."""
    outcomes = []
    for n in range(rounds):
        outcomes.append(advance(environment_id=env.pk))
        if outcomes[-1] == wanted:
            return
        cluster_tick(backend=SimulatedBackend(), seconds=0.0, rng=random.Random(n), demo=True)
        drain_audit()
    env.refresh_from_db()
    raise AssertionError(f"{outcomes} ({env.status}: {env.status_reason})")


def test_no_pipeline_step_calls_the_cluster_inside_a_transaction(people, monkeypatch):
    calls: Counter[str] = Counter()

    def guarded():
        return OutsideTransactions(SimulatedBackend(), calls)

    for module, name in (
        (provisioning, "get_backend"),
        (sleep_steps, "get_backend"),
        (teardown, "_get_backend"),
    ):
        monkeypatch.setattr(module, name, guarded)
    if not InstanceType.objects.exists():
        seed.seed_demo()

    with tasks_held():  # each pass is run here, not by a task
        env, _ = environment_request_submit(
            actor=people["alice"],
            data=request_data(tenant_control_plane=True, spot_node_pool=True),
        )
        _advance_until(environment_provision, env, "ready")
        env.refresh_from_db()
        SimulatedBackend().apply(  # a workload of the team's own, for sleep to scale
            [
                deployment(
                    namespace=env.namespace,
                    name="web",
                    workload_class="standard",
                    replicas=2,
                    cpu="100m",
                    memory="64Mi",
                )
            ],
            field_manager="kubectl-client-side-apply",
        )
        sleep_environment(env, actor=people["alice"], reason="night")
        _advance_until(environment_sleep_advance, env, "sleeping")
        env.refresh_from_db()
        wake_environment(env, actor=people["alice"], reason="morning")
        _advance_until(environment_wake_advance, env, "ready")
        env.refresh_from_db()
        environment_teardown_request(actor=people["alice"], environment=env)
        _advance_until(environment_teardown, env, "deleted")

    assert Environment.objects.get(pk=env.pk).status == Status.DELETED
    # Every kind of cluster call the pipelines make was seen, and checked.
    for name in ("apply", "health_many", "write_secret", "scale", "delete", "tenant"):
        assert calls[name] > 0, (name, calls)
