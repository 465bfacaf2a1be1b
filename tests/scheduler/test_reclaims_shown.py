"""Spot reclaims on the scheduler page: which node, when, which pods moved and where they run now."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from audit.chain.writer import AuditWriter
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import Actor
from scheduler import cluster_reads, seed
from scheduler.simulation.reclaims import node_reclaim_notice, spot_reclaims
from tests.scheduler.conftest import cluster_pod

pytestmark = pytest.mark.django_db
ADMIN = Actor("root", roles=frozenset({"platform-admin"}))


@pytest.fixture
def reclaimed(cluster, settings):
    """ip-pay (payments' spot node) noticed and gone; its pod web-1's ReplicaSet runs again on
    ip-shared (web-2). Everything chained, as the audit writer does."""
    settings.KILN_SIM_SPOT_NOTICE_SECONDS = 0.0
    seed.seed_demo()
    node = cluster.get("v1", "Node", None, "ip-pay")
    assert node_reclaim_notice(backend=cluster, node=node) == ["pay-dev/web-1"]
    assert spot_reclaims(backend=cluster, seconds=0.0)["reclaimed"] == ["ip-pay"]
    cluster_pod("web-2", "ip-shared", namespace="pay-dev", cpu="1", workload_class="batch")
    AuditWriter(block_ms=0).run_once()
    return cluster


def person(name: str, team: str | None) -> Client:
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-123")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    if team:
        Membership.objects.create(user=user, team=Team.objects.get(slug=team))
    client = Client()
    client.force_login(user)
    return client


def test_a_reclaim_names_the_node_its_times_and_where_each_moved_pod_runs_now(reclaimed):
    state = cluster_reads.cluster_state(viewer=ADMIN, backend=reclaimed)
    [r] = state.reclaims
    assert (r.node, r.nodepool, r.environment) == ("ip-pay", "kiln-pay-dev", "pay-dev")
    assert (r.instance_type, r.zone) == ("m6i.xlarge", "us-east-1b")
    assert r.reclaimed_at is not None and r.reclaimed_at >= r.noticed_at
    assert r.reclaim_at is not None
    [moved] = r.moved
    assert (moved.pod, moved.owner, moved.workload_class) == (
        "pay-dev/web-1",
        "ReplicaSet/web",
        "batch",
    )
    assert moved.now_on == ["ip-shared"]
    [workload] = r.workloads
    assert (workload.owner, workload.pods, workload.now_on) == (
        "ReplicaSet/web",
        ["pay-dev/web-1"],
        ["ip-shared"],
    )


def test_the_page_shows_a_teams_reclaims_to_it_and_not_to_another_team(reclaimed):
    page = person("alice", "payments").get(reverse("scheduler:overview")).content.decode()
    assert 'id="reclaims-list"' in page
    section = page[page.index('id="reclaims"') : page.index("Score explainer")]
    assert "ip-pay" in section and "pay-dev/web-1" in section and "ip-shared" in section
    assert "ReplicaSet/web" in section
    other = person("bob", "search").get(reverse("scheduler:overview")).content.decode()
    section = other[other.index('id="reclaims"') : other.index("Score explainer")]
    assert "ip-pay" not in section and "web-1" not in section
    assert "No spot node has been reclaimed yet." in section


def test_a_notice_not_yet_due_shows_when_the_node_goes(cluster, settings):
    settings.KILN_SIM_SPOT_NOTICE_SECONDS = 120.0
    seed.seed_demo()
    node_reclaim_notice(backend=cluster, node=cluster.get("v1", "Node", None, "ip-pay"))
    AuditWriter(block_ms=0).run_once()
    [r] = cluster_reads.cluster_state(viewer=ADMIN, backend=cluster).reclaims
    # The annotation keeps whole seconds (as Kubernetes timestamps do) and the notice is noticed
    # when its audit event is recorded, after the node is annotated: a little under 120 s.
    assert r.reclaimed_at is None and 110 < (r.reclaim_at - r.noticed_at).total_seconds() <= 120
    page = person("alice", "payments").get(reverse("scheduler:overview")).content.decode()
    assert "due " in page[page.index('id="reclaims"') :]
