"""An environment with its own spot pool and a quota smaller than one node still gets nodes: the
NodePool's limits hold whole nodes of its types, its pods run only there, no other team's pod
runs there, and teardown drains and removes them (the simulated cluster, driven by its tick)."""

from __future__ import annotations

import random

import pytest

from kiln.cluster.nodes import is_daemon_pod, labels_of, name_of, node_list, pod_list, pod_node
from kiln.cluster.simulated import SimulatedBackend
from portal.compose import EnvironmentSpec
from portal.compose.capacity import node_pool, pool_limits
from portal.lifecycle import Status
from portal.services import (
    environment_request_submit,
    environment_teardown,
    environment_teardown_request,
)
from scheduler import seed
from scheduler.simulation import cluster_tick
from tests.portal.conftest import drain_audit, request_data

SHAPES = {"m6i.xlarge": (4.0, 16.0), "c6i.2xlarge": (8.0, 16.0), "m5.xlarge": (4.0, 16.0)}


def _spec(**kw) -> EnvironmentSpec:
    base = dict(
        request_id="r1",
        team="payments",
        name="small",
        namespace="payments-small",
        env_class="ephemeral",
        ttl_hours=4,
        workload_class="batch",
        cpu=2,
        memory_gib=4,
        spot_node_pool=True,
        node_shapes=SHAPES,
    )
    base.update(kw)
    return EnvironmentSpec(**base)


@pytest.mark.parametrize(
    ("cpu", "memory_gib", "shapes", "expected"),
    [
        # 2 CPUs, 4 GiB: 3 x quota (6, 12) is below one 16-GiB node; 3 x the largest type
        # (c6i.2xlarge: 8 CPUs, 16 GiB) = (24, 48) holds the three nodes the pool may need.
        (2, 4, SHAPES, (24, 48)),
        # 16 CPUs, 64 GiB: 3 x quota (48, 192) already holds three of the largest nodes.
        (16, 64, SHAPES, (48, 192)),
        # No shapes known: the quota alone, as before.
        (2, 4, {}, (6, 12)),
    ],
    ids=["small-quota-raised-to-nodes", "large-quota-kept", "no-shapes-quota-only"],
)
def test_pool_limits_hold_whole_nodes_of_the_largest_type(cpu, memory_gib, shapes, expected):
    spec = _spec(cpu=cpu, memory_gib=memory_gib, node_shapes=shapes)
    assert pool_limits(spec, tuple(sorted(spec.spot_instance_types))) == expected
    limits = node_pool(spec)["spec"]["limits"]
    assert limits == {"cpu": str(expected[0]), "memory": f"{expected[1]}Gi"}


def _tick(backend) -> None:
    cluster_tick(backend=backend, seconds=0.0, rng=random.Random(5), demo=True)


@pytest.mark.django_db
def test_small_spot_environment_runs_on_its_own_nodes_alone_and_teardown_removes_them(
    people, settings, django_capture_on_commit_callbacks
):
    seed.seed_demo()
    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(
            actor=people["alice"],
            data=request_data(
                name="small",
                env_class="ephemeral",
                ttl_hours=4,
                cpu=2,
                memory_gib=4,
                spot_node_pool=True,
                workload_class="batch",
            ),
        )
        other, _ = environment_request_submit(
            actor=people["bob"],
            data=request_data(
                team="search",
                name="neighbour",
                env_class="ephemeral",
                ttl_hours=4,
                cpu=2,
                memory_gib=4,
                workload_class="batch",
            ),
        )
    env.refresh_from_db()
    other.refresh_from_db()
    assert env.status == Status.READY, env.status_reason
    assert other.status == Status.READY, other.status_reason
    backend = SimulatedBackend()
    pool = f"kiln-{env.namespace}"
    _tick(backend)
    _tick(backend)

    pods = pod_list(backend, namespace=env.namespace)
    assert len(pods) == 5
    own = {name_of(n) for n in node_list(backend, nodepool=pool)}
    assert own, "the environment's NodePool launched no node"
    for n in node_list(backend, nodepool=pool):
        assert labels_of(n)["karpenter.sh/nodepool"] == pool
    for pod in pods:
        assert pod_node(pod) in own, (name_of(pod), pod_node(pod))
        assert (pod.get("status") or {}).get("phase") == "Running", name_of(pod)
    # No other namespace's workload pod on the pool's nodes, and the neighbour's pods run.
    strangers = [
        f"{p['metadata']['namespace']}/{name_of(p)}"
        for p in pod_list(backend)
        if pod_node(p) in own
        and p["metadata"]["namespace"] != env.namespace
        and not is_daemon_pod(p)
    ]
    assert strangers == []
    theirs = pod_list(backend, namespace=other.namespace)
    assert theirs and all(pod_node(p) and pod_node(p) not in own for p in theirs)

    environment_teardown_request(actor=people["alice"], environment=env, reason="done")
    for _ in range(6):
        if environment_teardown(environment_id=env.pk) == "deleted":
            break
        _tick(backend)
        drain_audit()
    env.refresh_from_db()
    assert env.status == Status.DELETED, env.status_reason
    assert node_list(backend, nodepool=pool, include_deleting=True) == []
    assert [p for p in pod_list(backend) if pod_node(p) in own] == []
