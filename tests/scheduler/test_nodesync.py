"""Node sync: the service's upserts and audit, sync from the configured cluster, and a Kubernetes list+watch
through the real `kubernetes` client against a local HTTP server speaking the API."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client

from audit.models import OutboxEvent
from kiln.cluster import ref_of
from kiln.cluster.backends import get_backend
from kiln.errors import InvalidInput
from kiln.identity.permissions import system_actor
from scheduler import nodesync, services
from scheduler.models import CommitmentSample, Node, NodeLifetime, NodeSource
from scheduler.services import ObservedNode
from tests.scheduler.conftest import cluster_node, cluster_pod, node_object
from tests.support.serving import serve_in_thread

pytestmark = pytest.mark.django_db

ACTOR = system_actor(nodesync.ACTOR)


def observed(name: str, capacity: str = "on-demand", cpu: int = 4000, req: int = 0) -> ObservedNode:
    return ObservedNode(
        name=name,
        labels={
            "karpenter.sh/capacity-type": capacity,
            "node.kubernetes.io/instance-type": "m6i.xlarge",
            "topology.kubernetes.io/zone": "us-east-1b",
        },
        allocatable_cpu_millis=cpu,
        allocatable_memory_bytes=16 * 2**30,
        requested_cpu_millis=req,
    )


def test_sync_creates_updates_deletes_and_audits_once():
    first = services.node_sync(
        actor=ACTOR, source=NodeSource.SIMULATED, observed=[observed("a"), observed("b", "spot")]
    )
    assert first.created == ["a", "b"]
    b = Node.objects.get(name="b")
    assert (b.capacity_type, b.instance_type, b.zone) == ("spot", "m6i.xlarge", "us-east-1b")
    second = services.node_sync(
        actor=ACTOR, source=NodeSource.SIMULATED, observed=[observed("a", req=1000)]
    )
    assert (second.created, second.updated, second.deleted) == ([], ["a"], ["b"])
    assert Node.objects.get(name="a").requested_cpu_millis == 1000
    events = list(OutboxEvent.objects.filter(action="scheduler.nodes.synced").order_by("id"))
    assert [e.data["created"] for e in events] == [["a", "b"], []]
    assert events[1].data["deleted"] == ["b"] and events[1].actor == "system:scheduler-node-sync"


def test_sync_without_changes_writes_nothing():
    services.node_sync(actor=ACTOR, source=NodeSource.SIMULATED, observed=[observed("a")])
    count = OutboxEvent.objects.count()
    again = services.node_sync(actor=ACTOR, source=NodeSource.SIMULATED, observed=[observed("a")])
    assert not again.changed
    assert OutboxEvent.objects.count() == count


def test_sync_leaves_other_sources_alone():
    services.node_sync(actor=ACTOR, source=NodeSource.KUBERNETES, observed=[observed("k8s-1")])
    services.node_sync(actor=ACTOR, source=NodeSource.SIMULATED, observed=[])
    assert Node.objects.filter(name="k8s-1").exists()


@pytest.mark.parametrize(
    ("source", "nodes"),
    [
        ("nowhere", [observed("a")]),
        (NodeSource.SIMULATED, [observed("a"), observed("a")]),
        (NodeSource.SIMULATED, [observed("")]),
    ],
    ids=["unknown-source", "duplicate-names", "empty-name"],
)
def test_bad_sync_input_is_refused_and_changes_nothing(source, nodes):
    before = OutboxEvent.objects.count()
    with pytest.raises(InvalidInput):
        services.node_sync(actor=ACTOR, source=source, observed=nodes)
    assert Node.objects.count() == 0
    assert OutboxEvent.objects.count() == before


def test_unknown_capacity_label_is_stored_as_unknown():
    services.node_sync(
        actor=ACTOR, source=NodeSource.SIMULATED, observed=[observed("a", capacity="cheap")]
    )
    assert Node.objects.get(name="a").capacity_type == "unknown"


def test_cluster_sync_reads_nodes_and_pods_of_the_configured_cluster():
    # Two nodes of 4 cpu: on a, a 1 cpu workload pod and a 500m DaemonSet pod; one pod pending.
    cluster_node("ip-a", "on-demand", nodepool="kiln-pay-dev", environment="pay-dev")
    cluster_node("ip-b", "spot", itype="m6a.xlarge", zone="us-east-1b")
    cluster_pod("web-1", "ip-a", cpu="1", memory="2Gi")
    cluster_pod("agent-1", "ip-a", cpu="500m", memory="512Mi", owner="DaemonSet")
    cluster_pod("big-1", None, cpu="16")
    synced = nodesync.cluster_sync(backend=get_backend("simulated"))
    assert synced.result.created == ["ip-a", "ip-b"]
    a = Node.objects.get(name="ip-a")
    assert a.source == NodeSource.CLUSTER
    # The inventory's requested is what the node holds, DaemonSets included (the extender
    # packs against it): 1000m + 500m.
    assert (a.allocatable_cpu_millis, a.requested_cpu_millis) == (4000, 1500)
    assert Node.objects.get(name="ip-b").capacity_type == "spot"
    # Workload Commitment leaves the DaemonSet out: 1000m of 8000m; the 16 cpu pod is beside it.
    cpu = synced.commitment.resource("cpu")
    assert (cpu.committed, cpu.capacity, cpu.ratio, cpu.pending) == (1000, 8000, 0.125, 16000)
    sample = CommitmentSample.objects.get()
    assert sample.figures["resources"]["cpu"]["ratio"] == 0.125 and sample.nodes == 2
    lifetime = NodeLifetime.objects.get(name="ip-a")
    assert (lifetime.environment, lifetime.nodepool, lifetime.removed_at) == (
        "pay-dev",
        "kiln-pay-dev",
        None,
    )
    # A sample is a metric: nothing of it goes on the audit chain.
    assert not OutboxEvent.objects.filter(action__startswith="scheduler.commitment").exists()


def test_cluster_sync_closes_lifetimes_of_removed_nodes_and_samples_only_on_change(settings):
    settings.KILN_SIM_DELAY_PROFILE = "zero"  # a deleted node is gone at once
    cluster_node("ip-a", environment="pay-dev")
    backend = get_backend("simulated")
    nodesync.cluster_sync(backend=backend)
    again = nodesync.cluster_sync(backend=backend)
    assert not again.result.changed
    assert CommitmentSample.objects.count() == 1  # nothing moved: no new sample, no audit
    assert backend.delete(ref_of(backend.get("v1", "Node", None, "ip-a")))
    gone = nodesync.cluster_sync(backend=backend)
    assert gone.result.deleted == ["ip-a"]
    lifetime = NodeLifetime.objects.get(name="ip-a")
    assert lifetime.removed_at is not None and lifetime.removed_at >= lifetime.launched_at
    synced = OutboxEvent.objects.filter(action="scheduler.nodes.synced").order_by("id").last()
    assert synced.data["removed"] == ["ip-a"]
    assert CommitmentSample.objects.count() == 2
    # A node of the same name launched again opens a second lifetime.
    assert backend.list("v1", "Node") == []
    cluster_node("ip-a", environment="pay-dev")
    nodesync.cluster_sync(backend=backend)
    assert NodeLifetime.objects.filter(name="ip-a").count() == 2


def test_toy_node_list_is_gone():
    assert not hasattr(nodesync, "simulated_sync") and not hasattr(nodesync, "SIMULATED_POOLS")


# --- a local Kubernetes API server ------------------------------------------------------------


class FakeApi:
    """State served by the local API server: nodes, pods, queued watch events and the requests seen."""

    def __init__(self) -> None:
        self.nodes = [node_object("ip-10-0-1-1", "on-demand"), node_object("ip-10-0-1-2", "spot")]
        self.pods = [
            {
                "metadata": {"name": "web-1", "namespace": "payments", "labels": {}},
                "spec": {
                    "nodeName": "ip-10-0-1-1",
                    "containers": [
                        {
                            "name": "web",
                            "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}},
                        }
                    ],
                },
                "status": {"phase": "Running"},
            },
            {
                "metadata": {"name": "done-1", "namespace": "payments"},
                "spec": {
                    "nodeName": "ip-10-0-1-1",
                    "containers": [{"name": "x", "resources": {"requests": {"cpu": "2"}}}],
                },
                "status": {"phase": "Succeeded"},
            },
        ]
        self.events: list[dict] = []
        self.requests: list[str] = []


def serve(api: FakeApi) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            api.requests.append(self.path)
            url = urlparse(self.path)
            query = parse_qs(url.query)
            if url.path == "/api/v1/nodes" and query.get("watch") in (["true"], ["True"]):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                for event in api.events:
                    self.wfile.write(json.dumps(event).encode() + b"\n")
                return
            if url.path == "/api/v1/nodes":
                body = {
                    "kind": "NodeList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "100"},
                    "items": api.nodes,
                }
            elif url.path == "/api/v1/pods":
                body = {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "100"},
                    "items": api.pods,
                }
            else:
                self.send_response(404)
                self.end_headers()
                return
            payload = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_thread(server)
    return server


@pytest.fixture
def kube():
    api = FakeApi()
    server = serve(api)
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    api_client = client.ApiClient(configuration)
    yield api, nodesync.KubernetesNodeSource(api_client)
    api_client.close()
    server.shutdown()
    server.server_close()


def test_kubernetes_list_sync_reads_labels_allocatable_and_pod_requests(kube):
    api, source = kube
    result = source.sync()
    assert result.created == ["ip-10-0-1-1", "ip-10-0-1-2"]
    node = Node.objects.get(name="ip-10-0-1-1")
    assert node.source == NodeSource.CLUSTER
    assert node.capacity_type == "on-demand"
    assert node.allocatable_cpu_millis == 3920
    assert node.allocatable_memory_bytes == 14 * 2**30
    # Only the running pod counts: 1500m and 2Gi; the Succeeded pod is ignored.
    assert (node.requested_cpu_millis, node.requested_memory_bytes) == (1500, 2 * 2**30)
    assert Node.objects.get(name="ip-10-0-1-2").capacity_type == "spot"
    assert source.resource_version == "100"
    assert any(
        r.startswith("/api/v1/pods") and "fieldSelector=spec.nodeName" in r for r in api.requests
    )


def test_kubernetes_watch_applies_added_modified_deleted(kube):
    api, source = kube
    source.sync()
    changed = node_object("ip-10-0-1-2", "on-demand")
    changed["metadata"]["resourceVersion"] = "102"
    api.events = [
        {
            "type": "ADDED",
            "object": {**node_object("ip-10-0-1-3", "spot"), "kind": "Node", "apiVersion": "v1"},
        },
        {"type": "MODIFIED", "object": {**changed, "kind": "Node", "apiVersion": "v1"}},
        {
            "type": "DELETED",
            "object": {
                **node_object("ip-10-0-1-1", "on-demand"),
                "kind": "Node",
                "apiVersion": "v1",
            },
        },
    ]
    applied = source.watch(timeout_seconds=5)
    assert applied == 3
    assert sorted(Node.objects.values_list("name", "capacity_type")) == [
        ("ip-10-0-1-2", "on-demand"),
        ("ip-10-0-1-3", "spot"),
    ]
    watch_request = next(r for r in api.requests if "watch=" in r)
    assert "resourceVersion=100" in watch_request
    assert source.resource_version == "42"  # the last event's object carried resourceVersion 42
    actions = list(
        OutboxEvent.objects.filter(action="scheduler.node.synced").values_list("data", flat=True)
    )
    assert [a["event"] for a in actions] == ["ADDED", "MODIFIED", "DELETED"]


def test_the_inventory_carries_workloads_per_node_and_the_deployed_extender_spreads_with_them():
    """Node sync stores each node's pods per workload; the extender's own snapshot (the inventory,
    as the deployed extender answers) then fails a full capacity pool's spot nodes."""
    import orjson

    from scheduler import selectors
    from scheduler.extender.handler import FILTER, extender_call

    for name, zone in (("a1", "us-east-1a"), ("a2", "us-east-1a"), ("b1", "us-east-1b")):
        cluster_node(name, "spot", itype="m6a.xlarge", zone=zone)
    cluster_node("od", "on-demand")
    cluster_pod("web-1", "a1")
    cluster_pod("web-2", "a2")
    pending = cluster_pod("web-3", None)
    cluster_pod("web-4", None)
    cluster_pod("agent-1", "a1", owner="DaemonSet")  # node agents are no workload's replicas
    nodesync.cluster_sync(backend=get_backend("simulated"))
    # Four replicas of payments/ReplicaSet/web (two pending): one on each of a1 and a2.
    assert Node.objects.get(name="a1").workloads == {"payments/ReplicaSet/web": [1, 4]}
    assert Node.objects.get(name="b1").workloads == {}
    selectors.snapshot_invalidate()
    body = orjson.dumps({"Pod": pending, "Nodes": None, "NodeNames": ["a1", "a2", "b1", "od"]})
    status, raw = extender_call(FILTER, body)
    result = orjson.loads(raw)
    assert status == 200
    # ceil(4/2) = 2 and us-east-1a's pool holds 2: its nodes are out, b1 and on-demand stay.
    assert result["NodeNames"] == ["b1", "od"]
    reason = result["FailedAndUnresolvableNodes"]["a1"]
    assert "capacity pool m6a.xlarge/us-east-1a/spot already holds 2" in reason
