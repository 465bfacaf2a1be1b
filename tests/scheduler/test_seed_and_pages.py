"""Demo pricing seed, the overview page and the score explainer."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from audit.models import OutboxEvent
from kiln.cluster.backends import get_backend
from scheduler import nodesync, seed
from scheduler.models import InstanceType, Node, ReplayReport, SpotPrice
from tests.scheduler.conftest import cluster_node

pytestmark = pytest.mark.django_db


def test_seed_creates_realistic_pricing_once_and_no_nodes_of_its_own():
    created = seed.seed_demo()
    assert InstanceType.objects.count() == len(seed.INSTANCE_TYPES)
    assert SpotPrice.objects.count() == len(seed.INSTANCE_TYPES) * len(seed.ZONES)
    g5 = InstanceType.objects.get(name="g5.xlarge")
    assert (g5.gpus, g5.gpu_model) == (1, "NVIDIA A10G")
    assert str(InstanceType.objects.get(name="m5.large").on_demand_hourly) == "0.0960"
    # Every spot quote is under its on-demand price.
    for quote in SpotPrice.objects.select_related("instance_type"):
        assert quote.hourly < quote.instance_type.on_demand_hourly
    # Nodes come from the cluster (node sync), never from a list of the seed's own.
    assert not Node.objects.exists() and not any(c.startswith("node ") for c in created)
    events = OutboxEvent.objects.count()
    assert OutboxEvent.objects.filter(action="scheduler.pricing.seeded").count() == 1
    assert seed.seed_demo() == []
    assert OutboxEvent.objects.count() == events


@pytest.fixture
def user_client() -> Client:
    client = Client()
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    alice.groups.add(Group.objects.get_or_create(name="engineer")[0])  # role-less people get 403
    client.force_login(alice)
    return client


def test_overview_requires_login():
    response = Client().get(reverse("scheduler:overview"))
    assert response.status_code == 302


def _cluster_nodes() -> None:
    cluster_node("ip-od-1", "on-demand")
    cluster_node("ip-spot-1", "spot", itype="m6a.xlarge")
    cluster_node("ip-spot-2", "spot", itype="c6i.2xlarge", zone="us-east-1b")
    nodesync.cluster_sync(backend=get_backend("simulated"))


def test_overview_lists_pricing_nodes_and_stored_replays(user_client):
    seed.seed_demo()
    _cluster_nodes()
    ReplayReport.objects.create(
        created_at="2026-01-01T00:00:00Z", parts="0", seed=1, nodes=12583, placements=10, latency_class_placements=2,
        parse_seconds=1.0,
        report={"runs": [{"scheduler": "kiln", "start": "trace", "spot_fraction": 0.5, "latency_on_spot": 0,
                          "unschedulable": 1, "cost": 12.5, "savings_vs_on_demand": 0.3, "wall_seconds": 1.0}]},
    )  # fmt: skip
    page = user_client.get(reverse("scheduler:overview")).content.decode()
    assert "g5.xlarge" in page and "NVIDIA A10G" in page and "0.0960" in page
    assert "ip-spot-1" in page and "spot" in page
    assert 'id="replay-data"' in page and "kiln (trace)" in page
    assert "<script>" not in page.replace("<script src=", "")  # no inline script (CSP)


def test_score_explainer_scores_a_sample_pod(user_client):
    seed.seed_demo()
    _cluster_nodes()
    url = reverse("scheduler:explain")
    data = {"cpu": "0.5", "memory_gib": "1", "gpus": "0", "workload_class": "unlabelled"}
    html = user_client.post(url, data).content.decode()
    # Unlabelled means latency-sensitive: every spot node is refused with the guarantee's reason.
    spot = Node.objects.filter(capacity_type="spot").count()
    assert spot == 2
    assert html.count("node is spot capacity and the pod is latency-sensitive") == spot
    batch = user_client.post(url, {**data, "workload_class": "batch"}).content.decode()
    assert "node is spot capacity" not in batch


def test_score_explainer_rejects_bad_input(user_client):
    response = user_client.post(
        reverse("scheduler:explain"),
        {"cpu": "-1", "memory_gib": "x", "gpus": "0", "workload_class": "gold"},
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "Nothing was scored. CPU (cores): " in body and "kiln.dev/workload-class: " in body
    assert "Memory (GiB): Enter a number." in body


def test_score_explainer_names_the_limit_of_a_number_a_browser_could_not_read(user_client):
    # A number input would send 1e400 as nothing ("required"); a text one sends what was typed.
    page = user_client.get(reverse("scheduler:overview")).content.decode()
    assert 'name="cpu" value="0.5" inputmode="decimal"' in page.replace('type="text" ', "")
    response = user_client.post(
        reverse("scheduler:explain"),
        {"cpu": "1e400", "memory_gib": "1", "gpus": "0", "workload_class": "batch"},
    )
    assert response.status_code == 400
    assert "CPU (cores): Ensure this value is less than or equal to 1024." in (
        response.content.decode()
    )


def test_score_explainer_says_how_a_pod_asking_for_nothing_is_costed(user_client):
    seed.seed_demo()
    _cluster_nodes()
    data = {"cpu": "0", "memory_gib": "0", "gpus": "0", "workload_class": "batch"}
    html = user_client.post(reverse("scheduler:explain"), data).content.decode()
    # Its share is 0 everywhere; the $/h shown is each node's whole price, and the page says so.
    assert "It asks for nothing, so its share of every node is 0" in html
    assert "costed at the node's whole price" in html and " × 0.000 = " not in html
    sized = user_client.post(reverse("scheduler:explain"), {**data, "cpu": "0.5"}).content.decode()
    assert "It asks for nothing" not in sized and " × " in sized
