"""DaemonSets on the simulated cluster: one pod per eligible node, bound by the node's lifecycle,
counted in each node's requests and Karpenter's sizing, left out of Workload Commitment."""

from __future__ import annotations

import random

import pytest

from kiln.cluster import AppliedRef
from kiln.cluster.nodes import (
    L_NODEPOOL,
    is_daemon_pod,
    labels_of,
    name_of,
    node_list,
    node_manifest,
    node_status,
    pod_list,
    pod_manifest,
    pod_node,
    pod_owner,
    score_explanation,
)
from scheduler import karpenter as k
from scheduler.nodesync import commitment_of, requested_by_node
from scheduler.simulation import cluster_tick
from scheduler.simulation.demo import (
    MANAGEMENT_POOL,
    NODE_AGENT,
    SYSTEM_NAMESPACE,
    deployment,
    node_agent,
)
from scheduler.simulation.kubescheduler import KubeScheduler
from scheduler.simulation.provisioner import node_drain
from scheduler.simulation.workloads import daemon_eligible, workloads_reconcile
from tests.scheduler.conftest import NS_ENV, environment_cluster
from tests.scheduler.test_spot_guarantee_property import BOOK

pytestmark = pytest.mark.django_db

NS = NS_ENV
GIB = 2**30


@pytest.fixture
def backend(settings):
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    return environment_cluster(*node_agent())


def tick(b):
    return cluster_tick(backend=b, seconds=0.0, rng=random.Random(1), demo=False)


def agents(b) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for pod in pod_list(b, namespace=SYSTEM_NAMESPACE):
        if pod_owner(pod) == ("DaemonSet", NODE_AGENT):
            out.setdefault(pod_node(pod), []).append(pod)
    return out


def test_every_node_runs_one_agent_bound_by_the_node_not_the_scheduler(backend):
    tick(backend)  # launches nodes for the demo workload
    workloads_reconcile(backend=backend)  # the new nodes get their agents
    nodes = {name_of(n) for n in node_list(backend)}
    assert len(nodes) >= 2
    placed = agents(backend)
    assert set(placed) == nodes and all(len(p) == 1 for p in placed.values())
    for node, [pod] in placed.items():
        assert pod["status"]["phase"] == "Running"
        assert score_explanation(pod) is None  # never went through the extender
        term = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchFields"][0]
        assert term == {"key": "metadata.name", "operator": "In", "values": [node]}
    assert workloads_reconcile(backend=backend).created == []  # nothing more to do


def test_agents_count_in_the_nodes_requests_but_not_in_workload_commitment(backend):
    tick(backend)
    workloads_reconcile(backend=backend)
    nodes = node_list(backend)
    pods = pod_list(backend)
    requested = requested_by_node(pods)
    figures = commitment_of(nodes, pods)
    assert figures.daemonset_pods == len(nodes)
    workload_cpu = sum(
        int(p["spec"]["containers"][0]["resources"]["requests"]["cpu"].rstrip("m"))
        for p in pods
        if pod_node(p) and not is_daemon_pod(p)
    )
    # demo-web 2 x 250m + demo-batch 3 x 500m = 2,000m committed; every agent adds 50m requested.
    assert workload_cpu == 2000
    assert figures.resource("cpu").committed == pytest.approx(2000)
    assert sum(r[0] for r in requested.values()) == 2000 + 50 * len(nodes)


def test_a_node_that_goes_takes_its_agent_and_a_new_node_gets_one(backend):
    tick(backend)
    workloads_reconcile(backend=backend)
    victim = node_list(backend, nodepool=f"kiln-{NS}")[0]
    node_drain(backend=backend, node=victim, reason="Test")
    # The drain evicts workload pods, never the agent; the agent goes with the node.
    assert name_of(victim) in agents(backend)
    made = workloads_reconcile(backend=backend)
    assert name_of(victim) not in agents(backend)
    assert any(d.startswith(f"{SYSTEM_NAMESPACE}/{NODE_AGENT}-") for d in made.deleted)
    tick(backend)  # the evicted batch pods need a node again: Karpenter launches one
    workloads_reconcile(backend=backend)
    assert set(agents(backend)) == {name_of(n) for n in node_list(backend)}


def test_a_daemonset_runs_only_where_its_selector_and_tolerations_allow(backend):
    # A workload of no environment, so the shared kiln-general pool has a node (the
    # environment's own pods all run on its own pool).
    backend.apply(
        [
            deployment(
                namespace="default",
                name="shared",
                workload_class="standard",
                replicas=1,
                cpu="100m",
                memory="64Mi",
            )
        ]
    )
    tick(backend)
    picky = node_agent()[1]
    picky["metadata"]["name"] = "general-only"
    picky["spec"]["template"]["spec"]["tolerations"] = []
    picky["spec"]["template"]["spec"]["nodeSelector"] = {L_NODEPOOL: "kiln-general"}
    backend.apply([picky])
    workloads_reconcile(backend=backend)
    on = {
        pod_node(p)
        for p in pod_list(backend, namespace=SYSTEM_NAMESPACE)
        if pod_owner(p) == ("DaemonSet", "general-only")
    }
    general = {name_of(n) for n in node_list(backend, nodepool="kiln-general")}
    assert general and on == general
    backend.delete(AppliedRef("apps/v1", "DaemonSet", SYSTEM_NAMESPACE, "general-only"))
    workloads_reconcile(backend=backend)
    assert not [
        p
        for p in pod_list(backend, namespace=SYSTEM_NAMESPACE)
        if pod_owner(p)[1] == "general-only"
    ]


def test_eligibility_reads_taints_selector_and_the_disrupted_taint():
    tainted = {
        "metadata": {"labels": {L_NODEPOOL: MANAGEMENT_POOL}},
        "spec": {
            "taints": [{"key": "kiln.dev/management", "value": "true", "effect": "NoSchedule"}]
        },
    }
    plain = {"metadata": {"labels": {L_NODEPOOL: "kiln-general"}}, "spec": {}}
    draining = {
        "metadata": {"labels": {}},
        "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
    }
    everywhere = {"tolerations": [{"operator": "Exists"}]}
    assert daemon_eligible(everywhere, tainted) and daemon_eligible(everywhere, plain)
    assert not daemon_eligible({}, tainted) and daemon_eligible({}, plain)
    assert not daemon_eligible({"nodeSelector": {L_NODEPOOL: "other"}}, plain)
    assert not daemon_eligible(everywhere, draining)  # a node being drained gets no new pod
    assert labels_of(plain)[L_NODEPOOL] == "kiln-general"


def test_karpenter_leaves_room_for_the_daemonsets_on_a_new_node():
    offers = [
        k.Offering("m6i.large", "a", "on-demand", 2, 8 * GIB, 0.0, 0.096),
        k.Offering("m6i.xlarge", "a", "on-demand", 4, 16 * GIB, 0.0, 0.192),
    ]
    pod = k.PendingPod("a", 2.0, 1 * GIB, 0.0, {}, needs_on_demand=True)

    def plan(overhead):
        pool = k.Pool("p", "", {}, [], offers, (1e9, 1e18, 1e9), overhead=overhead)
        return [n.offering.instance_type for n in k.plan_launches([pool], [pod]).nodes]

    # 2 cores fit m6i.large exactly; with a 0.05-core agent on every node they no longer do.
    assert plan((0.0, 0.0, 0.0)) == ["m6i.large"]
    assert plan((0.05, 64 * 2**20, 0.0)) == ["m6i.xlarge"]


def test_the_scheduler_keeps_room_on_a_node_for_the_daemonset_pod_it_has_not_got_yet():
    """A node comes; the scheduler's pass runs before the node agent is bound to it: a pod
    asking the whole node must not take the agent's 50m (the node would read 102%)."""
    node = node_manifest(
        name="n1", instance_type="m6i.large", zone="a", capacity_type="on-demand", nodepool="p"
    )
    node["status"] = node_status(cpu=2.0, memory=8 * GIB, gpu=0)
    whole = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "whole", "namespace": "ns", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
        "status": {"phase": "Pending"},
    }
    agent = node_agent()[1]

    def outcome(daemon_sets, pods=(whole,)):
        scheduler = KubeScheduler(backend=None, pool_rules=False)
        [(_, placed, _)] = scheduler.placements(
            [node], list(pods), book=BOOK, daemon_sets=daemon_sets
        )
        return placed

    assert not isinstance(outcome([]), str)  # without the agent it fits exactly
    assert "Insufficient cpu" in outcome([agent])
    # Once the agent runs there, its pod is counted as any other, not twice.
    bound_agent = pod_manifest(
        namespace=SYSTEM_NAMESPACE, name="agent-1", owner_kind="DaemonSet",
        owner_name=NODE_AGENT, owner_uid="u", template=agent["spec"]["template"],
    )  # fmt: skip
    bound_agent["spec"]["nodeName"] = "n1"
    bound_agent["status"] = {"phase": "Running"}
    small = {**whole, "metadata": {**whole["metadata"], "name": "small"}}
    small["spec"] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1950m"}}}]}
    assert not isinstance(outcome([agent], pods=(bound_agent, small)), str)
