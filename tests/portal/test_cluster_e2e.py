"""End to end on the simulated cluster: an ephemeral environment with a spot node pool gets its demo workload
placed (latency-sensitive pods only on on-demand), survives a spot reclaim, and teardown leaves no node behind."""

from __future__ import annotations

import json
import random

import pytest

from audit.models import ChainEvent
from kiln.cluster.nodes import labels_of, name_of, node_list, pod_list, pod_node
from kiln.cluster.simulated import SimulatedBackend
from portal.lifecycle import Status
from portal.services import (
    environment_request_submit,
    environment_teardown,
    environment_teardown_request,
)
from scheduler import seed
from scheduler.simulation import cluster_tick
from scheduler.simulation.kubescheduler import latency_sensitive_on_spot
from scheduler.simulation.reclaims import node_reclaim_notice, spot_reclaims
from tests.portal.conftest import drain_audit, request_data

pytestmark = pytest.mark.django_db


def tick(backend):
    return cluster_tick(backend=backend, seconds=0.0, rng=random.Random(3), demo=True)


def test_spot_environment_demo_workload_reclaim_and_teardown(
    people, settings, django_capture_on_commit_callbacks
):
    settings.KILN_SIM_SPOT_NOTICE_SECONDS = 0.0
    seed.seed_demo()
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"],
            data=request_data(
                env_class="ephemeral", ttl_hours=8, spot_node_pool=True, workload_class="batch"
            ),
        )
    env.refresh_from_db()
    assert env.status == Status.READY, env.status_reason
    backend = SimulatedBackend()
    pool = f"kiln-{env.namespace}"

    tick(backend)
    pods = pod_list(backend, namespace=env.namespace)
    assert len(pods) == 5 and all(pod_node(p) for p in pods)
    nodes = {name_of(n): labels_of(n) for n in node_list(backend)}
    for pod in pods:
        capacity = nodes[pod_node(pod)]["karpenter.sh/capacity-type"]
        expected = "on-demand" if labels_of(pod)["app"] == "demo-web" else "spot"
        assert capacity == expected
        # On the environment's own pool, never the shared one (the namespace's admission
        # annotations gave every pod the pool's selector and toleration).
        assert nodes[pod_node(pod)]["karpenter.sh/nodepool"] == pool
        assert pod["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": pool}
    assert latency_sensitive_on_spot(backend) == []

    [spot] = node_list(backend, nodepool=pool, capacity_type="spot")[:1]
    evicted = node_reclaim_notice(backend=backend, node=spot)
    assert evicted
    assert spot_reclaims(backend=backend, seconds=0.0)["reclaimed"] == [name_of(spot)]
    tick(backend)
    pods = pod_list(backend, namespace=env.namespace)
    assert len(pods) == 5 and all(pod_node(p) not in ("", name_of(spot)) for p in pods)
    assert latency_sensitive_on_spot(backend) == []

    environment_teardown_request(actor=people["alice"], environment=env, reason="done")
    for _ in range(6):
        outcome = environment_teardown(environment_id=env.pk)
        if outcome == "deleted":
            break
        tick(backend)
        drain_audit()
    env.refresh_from_db()
    assert env.status == Status.DELETED, env.status_reason
    assert node_list(backend, nodepool=pool, include_deleting=True) == []
    assert node_list(backend, environment=env.namespace, include_deleting=True) == []
    # The drain-nodes step took them down and said which.
    drain_audit()
    [drained] = ChainEvent.objects.filter(action="portal.environment.nodes_drained")
    data = json.loads(drained.data)
    assert data["nodes"] and data["namespace"] == env.namespace
