"""Property: over random clusters and pods, the simulated kube-scheduler (through the extender) never
binds a latency-sensitive or unlabelled pod to spot capacity, in either nodeCacheCapable mode."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.cluster.nodes import node_manifest, node_status
from scheduler import scoring
from scheduler.extender.protocol import is_spot
from scheduler.simulation.kubescheduler import KubeScheduler

TYPES = ("m6i.large", "m6i.xlarge", "c6i.2xlarge", "unpriced.type")
BOOK = (
    {"m6i.large": Decimal("0.096"), "m6i.xlarge": Decimal("0.192"), "c6i.2xlarge": Decimal("0.34")},
    {("m6i.large", "a"): (Decimal("0.03"), 0), ("m6i.xlarge", "b"): (Decimal("0.06"), 4)},
)
# Spot as any provider labels it, on-demand, and no capacity label at all.
CAPACITY_LABELS = (
    {"karpenter.sh/capacity-type": "spot"},
    {"karpenter.sh/capacity-type": "on-demand"},
    {"eks.amazonaws.com/capacityType": "SPOT"},
    {"cloud.google.com/gke-spot": "true"},
    {},
)
CLASSES = (None, "latency-sensitive", "standard", "batch", "bogus", "")


@st.composite
def node(draw, i):
    capacity = draw(st.sampled_from(CAPACITY_LABELS))
    manifest = node_manifest(
        name=f"n{i}",
        instance_type=draw(st.sampled_from(TYPES)),
        zone=draw(st.sampled_from("abc")),
        capacity_type="on-demand",
        nodepool="p",
    )
    labels = manifest["metadata"]["labels"]
    labels.pop("karpenter.sh/capacity-type")
    labels.update(capacity)
    manifest["status"] = node_status(
        cpu=draw(st.sampled_from([0.0, 2.0, 4.0, 8.0])),
        memory=draw(st.sampled_from([0, 8, 16])) * 2**30,
        gpu=draw(st.sampled_from([0, 0, 1])),
    )
    return manifest


@st.composite
def pod(draw, i):
    cls = draw(st.sampled_from(CLASSES))
    labels = {"app": "x"} if cls is None else {"app": "x", scoring.WORKLOAD_CLASS_LABEL: cls}
    requests = {
        "cpu": draw(st.sampled_from(["0", "100m", "1", "3"])),
        "memory": draw(st.sampled_from(["0", "128Mi", "4Gi"])),
    }
    if draw(st.booleans()):
        requests["nvidia.com/gpu"] = "1"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}", "namespace": "ns", "labels": labels},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
        "status": {"phase": "Pending"},
    }


@st.composite
def cluster(draw):
    n = draw(st.integers(1, 12))
    m = draw(st.integers(1, 15))
    return [draw(node(i)) for i in range(n)], [draw(pod(i)) for i in range(m)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster(), st.booleans())
def test_no_latency_sensitive_or_unlabelled_pod_is_ever_bound_to_spot(data, cache_mode):
    nodes, pods = data
    spot = {n["metadata"]["name"] for n in nodes if is_spot(n["metadata"]["labels"])}
    scheduler = KubeScheduler(backend=None, node_cache_capable=cache_mode)
    bound = 0
    for p, outcome, _ in scheduler.placements(nodes, pods, book=BOOK):
        if isinstance(outcome, str):
            assert outcome  # pending pods always carry a reason
            continue
        bound += 1
        cls = scoring.workload_class_of(p["metadata"]["labels"])
        if cls == scoring.LATENCY_SENSITIVE:
            assert outcome.node not in spot, (p["metadata"], outcome.node)
    assert bound <= len(pods)
