"""cluster_bench and the simulated kube-scheduler's HTTP transport: kube-scheduler's way to the extender."""

from __future__ import annotations

import io
import json
import socket

import pytest
from django.core.management import CommandError, call_command

from bench.scheduler import cluster as bench
from kiln.cluster.nodes import pod_list, pod_node, pod_scheduled_condition, score_explanation
from kiln.cluster.simulated import SimulatedBackend
from scheduler import seed
from scheduler.simulation.kubescheduler import KubeScheduler, latency_sensitive_on_spot
from scheduler.simulation.transport import HttpExtender, served_extender

pytestmark = pytest.mark.django_db


@pytest.fixture
def bench_backend(settings):
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    seed.seed_demo()
    backend = SimulatedBackend()
    bench.bench_reset()
    bench.bench_cluster(backend=backend, nodes=24, pods=60, seed=1)
    yield backend
    bench.bench_reset()


def _placements(backend) -> dict[str, str]:
    return {
        p["metadata"]["name"]: pod_node(p) for p in pod_list(backend, namespace=bench.NAMESPACE)
    }


def _unbind_all(backend) -> None:
    """Start again from the same pending pods (the bench's own reset, then the same cluster)."""
    bench.bench_reset()
    bench.bench_cluster(backend=backend, nodes=24, pods=60, seed=1)


@pytest.mark.parametrize("cache_mode", [True, False], ids=["nodeCacheCapable", "full-nodes"])
def test_over_http_every_pod_lands_where_the_in_process_call_puts_it(bench_backend, cache_mode):
    in_process = KubeScheduler(backend=bench_backend, node_cache_capable=cache_mode).run()
    expected = _placements(bench_backend)
    assert len(in_process.bound) == 60 and all(expected.values())
    _unbind_all(bench_backend)
    assert not any(_placements(bench_backend).values())
    current: list[KubeScheduler] = []
    with served_extender(lambda: current[0].current_snapshot()) as client:
        scheduler = KubeScheduler(
            backend=bench_backend, node_cache_capable=cache_mode, transport=client
        )
        current.append(scheduler)
        over_http = scheduler.run()
    assert over_http.bound == in_process.bound
    assert _placements(bench_backend) == expected
    pod = pod_list(bench_backend, namespace=bench.NAMESPACE)[0]
    assert score_explanation(pod)["nodeCacheCapable"] is cache_mode
    assert latency_sensitive_on_spot(bench_backend) == []


def test_an_unreachable_extender_leaves_every_pod_pending_with_the_reason(bench_backend):
    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = KubeScheduler(backend=bench_backend, transport=HttpExtender("127.0.0.1", port)).run()
    assert result.bound == {} and len(result.unschedulable) == 60
    pod = pod_list(bench_backend, namespace=bench.NAMESPACE)[0]
    assert not pod_node(pod)
    message = pod_scheduled_condition(pod)["message"]
    assert message.startswith("extender filter failed: extender unreachable"), message


def test_cluster_bench_binds_every_pod_over_http_and_prints_its_figures():
    out = io.StringIO()
    call_command("cluster_bench", nodes=30, pods=90, seed=1, stdout=out)
    result = json.loads(out.getvalue())
    assert result["transport"]["mode"] == "http"
    assert result["bound"] == 90 and result["latency_sensitive_on_spot"] == 0
    # Everything bound in the first pass: no second pass over a cluster with nothing pending.
    assert result["passes"] == 1
    assert result["bind_latency_ms"]["p99"] >= result["bind_latency_ms"]["p50"] > 0
    cpu = result["workload_commitment"]["resources"]["cpu"]
    assert 0 < cpu["ratio"] <= 1 and cpu["pending"] == 0


def test_cluster_bench_refuses_a_port_out_of_range():
    with pytest.raises(CommandError, match="--extender-port"):
        call_command("cluster_bench", nodes=1, pods=1, extender_port=70000, stdout=io.StringIO())


def test_with_spread_groups_no_capacity_pool_holds_more_than_its_share_over_http(settings):
    """The bench's workloads (`--spread-group-size`): every pod placed over HTTP, and no capacity
    pool holding more than ceil(r/k) of a group's spot replicas (r = 6, k = 2: 3)."""
    from collections import Counter

    from kiln.cluster.nodes import labels_of, name_of, node_list
    from scheduler.pools import L_SPREAD_GROUP

    settings.KILN_SIM_DELAY_PROFILE = "zero"
    seed.seed_demo()
    backend = SimulatedBackend()
    bench.bench_reset()
    bench.bench_cluster(backend=backend, nodes=24, pods=60, seed=1, spread_group_size=6)
    try:
        current: list[KubeScheduler] = []
        with served_extender(lambda: current[0].current_snapshot()) as client:
            scheduler = KubeScheduler(backend=backend, transport=client)
            current.append(scheduler)
            result = scheduler.run()
        assert len(result.bound) == 60
        nodes = {name_of(n): labels_of(n) for n in node_list(backend)}
        held: Counter = Counter()
        for pod in pod_list(backend, namespace=bench.NAMESPACE):
            node = nodes[pod_node(pod)]
            if node["karpenter.sh/capacity-type"] == "spot":
                pool = (
                    node["node.kubernetes.io/instance-type"],
                    node["topology.kubernetes.io/zone"],
                )
                held[(labels_of(pod)[L_SPREAD_GROUP], pool)] += 1
        assert held and max(held.values()) <= 3
        # Only standard and batch groups reach spot (latency-sensitive pods never do).
        assert {group.split("-")[0] for group, _ in held} <= {"standard", "batch"}
    finally:
        bench.bench_reset()
