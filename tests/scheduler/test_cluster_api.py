"""The cluster's nodes and Workload Commitment: API (roles, team scoping, filters), page, /metrics."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from kiln.identity.models import Membership, Team
from scheduler import nodesync
from tests.scheduler.conftest import EXPLANATION

pytestmark = pytest.mark.django_db

NODES = "/api/v1/scheduler/nodes/"
COMMITMENT = "/api/v1/scheduler/commitment/"


def names(response) -> list[str]:
    return [n["name"] for n in response.json()["results"]]


def test_an_engineer_sees_shared_nodes_and_their_teams_not_another_teams(cluster, api_client_for):
    response = api_client_for("engineer", sub="alice", team="payments").get(NODES)
    assert response.status_code == 200
    assert names(response) == ["ip-pay", "ip-shared"]
    pay, shared = response.json()["results"]
    assert pay["nodepool"] == "kiln-pay-dev" and pay["environment"] == "pay-dev"
    assert (
        pay["capacity_type"] == "spot"
        and pay["labels"]["topology.kubernetes.io/zone"] == "us-east-1b"
    )
    assert pay["allocatable"] == {"cpu_millis": 4000, "memory_bytes": 16 * 2**30, "gpus": 0}
    assert pay["requested"]["cpu_millis"] == 1000
    (pod,) = pay["pods"]
    assert (pod["name"], pod["workload_class"], pod["owner_kind"]) == (
        "web-1",
        "batch",
        "ReplicaSet",
    )
    assert pod["explanation"] == EXPLANATION
    # On the shared node: the search team's pod and the platform's DaemonSet pod (no team owns
    # kube-system) are counted, not named; the node's requested totals count both.
    assert shared["pods"] == [] and shared["hidden_pods"] == 2 and pay["hidden_pods"] == 0
    assert shared["requested"]["cpu_millis"] == 2250 and shared["committed"]["cpu_millis"] == 2000


def test_an_unlabelled_pod_is_latency_sensitive_and_admins_see_every_node(cluster, api_client_for):
    response = api_client_for("platform-admin", sub="root").get(NODES)
    assert names(response) == ["ip-pay", "ip-search", "ip-shared"]
    shared = response.json()["results"][2]
    index = next(p for p in shared["pods"] if p["name"] == "index-1")
    assert index["workload_class"] == "latency-sensitive" and index["labelled_class"] is None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("capacity_type=spot", ["ip-pay"]),
        ("capacity_type=on-demand", ["ip-search", "ip-shared"]),
        ("environment=search-dev", ["ip-search"]),
        ("nodepool=general", ["ip-shared"]),
        ("nodepool=kiln-pay-dev&capacity_type=on-demand", []),
    ],
    ids=["spot", "on-demand", "environment", "nodepool", "both"],
)
def test_node_filters(cluster, api_client_for, query, expected):
    response = api_client_for("auditor", sub="audrey").get(f"{NODES}?{query}")
    assert response.status_code == 200 and names(response) == expected


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("capacity_type=cheap", "capacity_type"),
        ("environment=Not_A_Namespace", "environment"),
        ("environment=" + "a" * 64, "environment"),
        ("nodepool=-bad", "nodepool"),
        ("capacity_type=spot&capacity_type=on-demand", "capacity_type"),
        ("zone=us-east-1a", "zone"),
        ("nodepool=", "nodepool"),
    ],
    ids=["capacity", "env-chars", "env-length", "nodepool", "twice", "unknown", "empty"],
)
def test_bad_filters_are_a_400_naming_the_parameter(cluster, api_client_for, query, field):
    response = api_client_for("engineer", sub="alice", team="payments").get(f"{NODES}?{query}")
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]


def test_the_apis_need_credentials_and_a_role(cluster, api_client_for):
    for url in (NODES, COMMITMENT):
        assert APIClient().get(url).status_code == 401
        assert api_client_for(sub="nobody").get(url).status_code == 403


def test_commitment_is_the_whole_cluster_with_only_visible_nodes_listed(cluster, api_client_for):
    response = api_client_for("engineer", sub="alice", team="payments").get(COMMITMENT)
    assert response.status_code == 200
    body = response.json()
    cpu = body["resources"]["cpu"]
    assert (cpu["committed"], cpu["capacity"], cpu["ratio"]) == (3000, 12000, 0.25)
    assert (cpu["pending"], body["pending_pods"], body["daemonset_pods"]) == (8000, 1, 1)
    # Node ratios 0.25 (pay), 0.0 (search), 0.5 (shared): p90 is the observed ratio at or above it.
    assert cpu["spread"] == {"min": 0.0, "p50": 0.25, "p90": 0.5, "max": 0.5}
    assert body["resources"]["gpu"]["ratio"] is None
    assert [n["name"] for n in body["nodes"]] == ["ip-pay", "ip-shared"]
    assert body["nodes"][0]["cpu"] == {"committed": 1000, "capacity": 4000, "ratio": 0.25}
    assert api_client_for("engineer", sub="alice").get(f"{COMMITMENT}?x=1").status_code == 400


def test_scheduler_page_shows_nodes_pools_pods_explanations_and_commitment(cluster):
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    alice.groups.add(Group.objects.get_or_create(name="engineer")[0])
    Membership.objects.create(user=alice, team=Team.objects.get(slug="payments"))
    client = Client()
    client.force_login(alice)
    nodesync.cluster_sync(backend=cluster)
    page = client.get(reverse("scheduler:overview")).content.decode()
    assert "ip-shared" in page and "kiln-pay-dev" in page and "pay-dev" in page
    assert "&quot;packing&quot;: 0.5" in page  # the extender's explanation, as JSON
    assert "huge-1" in page and "Unschedulable" in page  # the pending pod and why
    assert 'id="commitment-data"' in page and 'id="commitment-now"' in page
    assert "<script>" not in page.replace("<script src=", "")


@pytest.mark.parametrize("processes", ["one", "several"])
def test_metrics_export_the_last_commitment_sample(cluster, processes, tmp_path, monkeypatch):
    if processes == "several":  # the web as several processes: read once, beside their sums
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    nodesync.cluster_sync(backend=cluster)
    text = Client().get("/metrics").content.decode()
    assert text.count("# TYPE kiln_workload_commitment_ratio gauge") == 1
    assert 'kiln_workload_commitment_ratio{resource="cpu"} 0.25' in text
    # 8000 millicores pending: 8 cores, in the name's base unit.
    assert "kiln_workload_commitment_pending_cpu_cores 8.0" in text
    assert 'kiln_workload_commitment_node_ratio{resource="cpu",statistic="max"} 0.5' in text
    assert "kiln_workload_pending_pods 1.0" in text
