"""Pods of the shared management namespace (every tenant control plane, named
`tcp-<namespace>-<name>-…`) are named to platform admins and to the team whose control plane
they are; everyone else sees them counted, never named: not in the nodes API, the
commitment API, the scheduler page or the score explainer."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from kiln.identity.models import Membership, Team
from scheduler import nodesync
from tests.scheduler.conftest import cluster_node, cluster_pod

pytestmark = pytest.mark.django_db

NODES = "/api/v1/scheduler/nodes/"
COMMITMENT = "/api/v1/scheduler/commitment/"
ENV = "payments-checkout-preview"
TCP_POD = f"tcp-{ENV}-5d8f7-abcde"


@pytest.fixture
def management(cluster):
    """The fixture cluster plus payments' environment with a spot node of its own NodePool,
    the management node running its tenant control plane's pod, and a pending one."""
    cluster.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kiln-management"}},
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ENV, "labels": {"kiln.dev/team": "payments"}},
            },
        ]
    )
    cluster_node("kiln-management-x1", nodepool="kiln-management")
    cluster_node(f"kiln-{ENV}-q7", "spot", nodepool=f"kiln-{ENV}", environment=ENV)
    served = {"kiln.dev/tenant-control-plane": f"{ENV}.checkout"}
    for name, node in ((TCP_POD, "kiln-management-x1"), (f"tcp-{ENV}-5d8f7-fghij", None)):
        cluster_pod(name, node, namespace="kiln-management", workload_class=None, labels=served)
    # A control plane whose serving label names no team's namespace: nobody's but the platform's.
    cluster_pod(
        "tcp-orphan-1",
        "kiln-management-x1",
        namespace="kiln-management",
        labels={"kiln.dev/tenant-control-plane": "gone.cp"},
    )
    nodesync.cluster_sync(backend=cluster)
    return cluster


def signed_in(username: str, role: str, team: str | None) -> Client:
    user, _ = get_user_model().objects.get_or_create(username=username)
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    if team:
        Membership.objects.get_or_create(user=user, team=Team.objects.get(slug=team))
    client = Client()
    client.force_login(user)
    return client


def explain(client: Client) -> str:
    form = {"cpu": "1", "memory_gib": "1", "gpus": "0", "workload_class": "standard"}
    response = client.post(reverse("scheduler:explain"), form)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def test_another_teams_engineer_sees_no_name_of_payments_anywhere(management, api_client_for):
    api = api_client_for("engineer", sub="bob", team="search")
    nodes = api.get(NODES)
    commitment = api.get(COMMITMENT)
    assert nodes.status_code == commitment.status_code == 200
    bob = signed_in("bob", "engineer", "search")
    page = bob.get(reverse("scheduler:overview")).content.decode()
    explained = explain(bob)
    for text in (nodes.content.decode(), commitment.content.decode(), page, explained):
        assert "payments" not in text and "pay-dev" not in text and "tcp-" not in text
    # Counted instead: the management node's two control-plane pods, the pending one.
    by_name = {n["name"]: n for n in nodes.json()["results"]}
    assert by_name["kiln-management-x1"]["pods"] == []
    assert by_name["kiln-management-x1"]["hidden_pods"] == 2
    assert "2 pods you may not see" in page and "pending pods you may not see" in page
    assert "kiln-management-x1" in explained and "ip-search" in explained


def test_the_owning_team_sees_its_control_plane_pods_not_the_orphan(management, api_client_for):
    nodes = api_client_for("engineer", sub="alice", team="payments").get(NODES).json()
    by_name = {n["name"]: n for n in nodes["results"]}
    assert [p["name"] for p in by_name["kiln-management-x1"]["pods"]] == [TCP_POD]
    assert by_name["kiln-management-x1"]["hidden_pods"] == 1  # tcp-orphan-1
    assert f"kiln-{ENV}-q7" in by_name
    page = signed_in("alice", "engineer", "payments").get(reverse("scheduler:overview"))
    assert TCP_POD in page.content.decode()


def test_platform_admins_see_every_management_pod_by_name(management, api_client_for):
    nodes = api_client_for("platform-admin", sub="root").get(NODES).json()
    by_name = {n["name"]: n for n in nodes["results"]}
    pods = [p["name"] for p in by_name["kiln-management-x1"]["pods"]]
    assert pods == ["tcp-orphan-1", TCP_POD] and by_name["kiln-management-x1"]["hidden_pods"] == 0
    root = signed_in("root", "platform-admin", None)
    page = root.get(reverse("scheduler:overview")).content.decode()
    assert TCP_POD in page and f"tcp-{ENV}-5d8f7-fghij" in page
    assert f"kiln-{ENV}-q7" in explain(root)
