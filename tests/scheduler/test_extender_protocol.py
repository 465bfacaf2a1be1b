"""The extender endpoints speak k8s.io/kube-scheduler/extender/v1 in both nodeCacheCapable modes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.test import Client

from bench.scheduler import extender as bench
from scheduler.extender.protocol import parse_args
from scheduler.extender.snapshot import NodeSnapshot
from scheduler.extender.verbs import prioritize_body, prioritize_result
from scheduler.models import Node
from scheduler.scoring import Weights
from tests.scheduler.conftest import node_object, pod

pytestmark = pytest.mark.django_db

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
SPOT_REASON = "node is spot capacity and the pod is latency-sensitive"


def post(path: str, body, client: Client | None = None, **headers):
    client = client or Client(enforce_csrf_checks=True)
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(path, data=data, content_type="application/json", **headers)


@pytest.mark.parametrize(
    ("workload_class", "passing", "unresolvable"),
    [
        # Latency-sensitive, unlabelled and unknown classes never see spot nodes.
        ("latency-sensitive", ["node-od", "node-mystery"], {"node-spot": SPOT_REASON}),
        (None, ["node-od", "node-mystery"], {"node-spot": SPOT_REASON}),
        ("platinum", ["node-od", "node-mystery"], {"node-spot": SPOT_REASON}),
        ("standard", ["node-od", "node-spot", "node-mystery"], {}),
        ("batch", ["node-od", "node-spot", "node-mystery"], {}),
    ],
    ids=["latency", "unlabelled", "unknown-class", "standard", "batch"],
)
def test_filter_with_node_names(inventory, workload_class, passing, unresolvable):
    body = {
        "Pod": pod(workload_class),
        "Nodes": None,
        "NodeNames": ["node-od", "node-spot", "node-mystery"],
    }
    response = post("/scheduler/filter", body)
    assert response.status_code == 200
    result = response.json()
    assert set(result) == FILTER_KEYS
    assert result["Nodes"] is None
    assert result["NodeNames"] == passing
    assert result["FailedAndUnresolvableNodes"] == unresolvable
    assert result["FailedNodes"] == {}
    assert result["Error"] == ""


def test_filter_with_full_node_objects_echoes_the_passing_nodes(inventory):
    nodes = [
        node_object("node-od", "on-demand"),
        node_object("node-spot", "spot"),
        node_object("node-new", None),
    ]
    body = {"Pod": pod(None), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    result = post("/scheduler/filter", body).json()
    # node-new is not in the inventory, but its labels say it is not spot: it passes, unpriced.
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["node-od", "node-new"]
    assert result["Nodes"]["items"][0] == nodes[0]  # returned unchanged
    assert result["FailedAndUnresolvableNodes"] == {"node-spot": SPOT_REASON}


def test_filter_trusts_the_labels_sent_over_the_inventory_in_node_mode(inventory):
    # The inventory says node-od is on-demand, but the node object now says spot: spot wins.
    body = {"Pod": pod("latency-sensitive"), "Nodes": {"items": [node_object("node-od", "spot")]}}
    result = post("/scheduler/filter", body).json()
    assert result["Nodes"]["items"] == []
    assert result["FailedAndUnresolvableNodes"] == {"node-od": SPOT_REASON}


def test_unknown_node_names_fail_closed(inventory):
    body = {"Pod": pod("batch"), "NodeNames": ["node-od", "ghost-1"]}
    result = post("/scheduler/filter", body).json()
    assert result["NodeNames"] == ["node-od"]
    assert result["FailedNodes"] == {"ghost-1": "node is not in kiln's inventory"}
    ranked = post("/scheduler/prioritize", body).json()
    assert ranked[1] == {"Host": "ghost-1", "Score": 0}


def test_insufficient_resources_go_to_failed_nodes(inventory):
    Node.objects.filter(name="node-od").update(requested_cpu_millis=3900)
    body = {"Pod": pod("standard", cpu="1"), "NodeNames": ["node-od", "node-spot"]}
    result = post("/scheduler/filter", body).json()
    assert result["NodeNames"] == ["node-spot"]
    assert result["FailedNodes"] == {"node-od": "Insufficient cpu"}
    assert result["FailedAndUnresolvableNodes"] == {}


def test_prioritize_returns_a_host_priority_list(inventory):
    body = {
        "Pod": pod("batch"),
        "Nodes": None,
        "NodeNames": ["node-od", "node-spot", "node-mystery"],
    }
    response = post("/scheduler/prioritize", body)
    assert response.status_code == 200
    ranked = response.json()
    assert [list(entry) for entry in ranked] == [["Host", "Score"]] * 3
    assert [e["Host"] for e in ranked] == ["node-od", "node-spot", "node-mystery"]
    scores = {e["Host"]: e["Score"] for e in ranked}
    assert all(isinstance(s, int) and 0 <= s <= 10 for s in scores.values())
    # Batch: spot is cheapest with a low interruption risk; the unpriced node costs the most.
    assert scores["node-spot"] > scores["node-od"] >= scores["node-mystery"]


def test_prioritize_gives_spot_zero_for_a_latency_pod(inventory):
    body = {"Pod": pod("latency-sensitive"), "NodeNames": ["node-od", "node-spot"]}
    ranked = post("/scheduler/prioritize", body).json()
    assert ranked[1] == {"Host": "node-spot", "Score": 0}
    assert ranked[0]["Score"] > 0


def test_go_field_names_match_case_insensitively(inventory):
    body = {"pod": pod("batch"), "nodenames": ["node-spot"]}
    assert post("/scheduler/filter", body).json()["NodeNames"] == ["node-spot"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "body is not JSON"),
        (b"[]", "ExtenderArgs must be a JSON object"),
        ({"NodeNames": ["node-od"]}, "Pod is missing"),
        ({"Pod": pod("batch")}, "needs Nodes"),
        ({"Pod": pod("batch"), "NodeNames": "node-od"}, "NodeNames must be a list of strings"),
        ({"Pod": pod("batch"), "Nodes": {"items": [{"metadata": {}}]}}, "metadata.name"),
        ({"Pod": pod("batch", cpu="lots"), "NodeNames": []}, "not a Kubernetes quantity"),
        (b"\xff\xfe", "body is not JSON"),
    ],
    ids=[
        "not-json",
        "not-object",
        "no-pod",
        "no-nodes",
        "names-not-list",
        "nameless-node",
        "bad-quantity",
        "bad-utf8",
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_malformed_bodies_get_a_400_with_the_reason_and_change_nothing(
    inventory, verb, body, reason
):
    before = list(Node.objects.order_by("name").values())
    response = post(f"/scheduler/{verb}", body)
    assert response.status_code == 400
    data = response.json()
    message = data["Error"] if verb == "filter" else data["message"]
    assert reason in message
    assert data["code"] == "malformed"
    assert list(Node.objects.order_by("name").values()) == before


def test_oversized_body_is_refused(inventory, settings):
    settings.KILN_SCHEDULER_MAX_BODY_BYTES = 1000
    body = {"Pod": pod("batch"), "NodeNames": [f"node-{i}" for i in range(500)]}
    response = post("/scheduler/filter", body)
    assert response.status_code == 413
    assert "KILN_SCHEDULER_MAX_BODY_BYTES" in response.json()["Error"]


def test_get_is_not_allowed(inventory):
    assert Client().get("/scheduler/filter").status_code == 405


def test_shared_token_is_enforced_when_configured(inventory, settings):
    settings.KILN_SCHEDULER_EXTENDER_TOKEN = "s3cret-token"
    body = {"Pod": pod("batch"), "NodeNames": ["node-od"]}
    assert post("/scheduler/filter", body).status_code == 401
    assert post("/scheduler/filter", body, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    ok = post("/scheduler/filter", body, HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert ok.status_code == 200
    assert ok.json()["NodeNames"] == ["node-od"]


def test_pod_effective_request_counts_init_containers_and_limits(inventory):
    # containers: 500m + 100m (limit used as request) = 600m; init container 3 cores dominates.
    Node.objects.filter(name="node-od").update(requested_cpu_millis=1500)
    init = [{"name": "migrate", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}]
    body = {"Pod": pod("standard", initContainers=init), "NodeNames": ["node-od", "node-spot"]}
    result = post("/scheduler/filter", body).json()
    # node-od: 1.5 used + 3 > 4 cores -> Insufficient cpu.
    assert result["FailedNodes"] == {"node-od": "Insufficient cpu"}


def test_node_object_capacity_type_disagreeing_with_inventory_is_unpriced(inventory):
    # node-od is priced as on-demand; the object now says spot. For a batch pod it is
    # scored as an unpriced spot node (highest price, worst risk), never with on-demand's zero risk.
    body = {
        "Pod": pod("batch"),
        "Nodes": {"items": [node_object("node-od", "spot"), node_object("node-spot", "spot")]},
    }
    ranked = {e["Host"]: e["Score"] for e in post("/scheduler/prioritize", body).json()}
    assert ranked["node-od"] < ranked["node-spot"]


def test_unpriced_node_is_charged_the_highest_price_in_the_book(inventory):
    # Candidates: node-spot ($0.065) and node-mystery (type x9.huge, unpriced). The book's highest
    # price is m6i.xlarge on-demand $0.1920, so the unpriced node costs 0.192, not 0.065:
    # standard pod, share 0.5/4 both: cost spot 1.0, mystery 0.065/0.192 = 0.339.
    body = {"Pod": pod("standard"), "NodeNames": ["node-spot", "node-mystery"]}
    ranked = {e["Host"]: e["Score"] for e in post("/scheduler/prioritize", body).json()}
    assert ranked["node-spot"] > ranked["node-mystery"]


@pytest.mark.parametrize(
    "name",
    ['odd"name', "back\\slash", "ünïcode", "tab\tname", "\U0001f600"],
    ids=["quote", "backslash", "unicode", "control", "emoji"],
)
def test_prioritize_encodes_any_node_name_as_valid_json(inventory, name):
    body = {"Pod": pod("batch"), "NodeNames": ["node-od", name]}
    response = post("/scheduler/prioritize", body)
    assert response.status_code == 200
    assert response.json() == [
        {"Host": "node-od", "Score": response.json()[0]["Score"]},
        {"Host": name, "Score": 0},
    ]


@pytest.mark.parametrize(
    "names",
    [
        ["node-00001", "node-00002", "node-00003"],  # all known: pre-encoded entries
        ["node-00001", "missing", "node-00002"],  # an unknown name
        ['we"ird\\nöde', "node-00001"],  # names that need escaping
        [],
    ],
    ids=["known", "unknown", "escaped", "empty"],
)
def test_prioritize_body_is_the_host_priority_list(names):
    """The fast prioritize encoding decodes to exactly prioritize_result, whatever the names."""
    snapshot = bench.synthetic_snapshot(20)
    matrix = np.vstack([snapshot.matrix, snapshot.matrix[:1]])
    snapshot = NodeSnapshot([*snapshot.names, 'we"ird\\nöde'], matrix)
    args = parse_args(bench.sample_body(names, "batch"))
    body = prioritize_body(args, snapshot, Weights())
    expected = prioritize_result(args, snapshot, Weights())
    assert json.loads(body) == expected
    assert [e["Host"] for e in expected] == names
