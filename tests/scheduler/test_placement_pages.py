"""The pages' view of placement: each workload's spread over capacity pools and the frozen nodes
on the scheduler page, an environment's own nodes on its page; each shown only to who may see it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from canary import services as canary_services
from kiln.cluster import AppliedRef
from kiln.cluster.backends import get_backend
from kiln.cluster.nodes import PodBinding, node_manifest, node_status, pod_manifest
from kiln.identity.models import Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from portal.models import Environment
from scheduler.freezes import disruption_freeze_hold
from scheduler.placement_reads import workload_spreads
from tests.canary.test_ownership_support import own_namespace
from tests.portal.test_pages import FORM, login

pytestmark = pytest.mark.django_db

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))


@pytest.fixture
def cluster(settings):
    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    return get_backend("simulated")


def add_node(backend, name, itype, zone, capacity, **kw) -> None:
    backend.apply([node_manifest(name=name, instance_type=itype, zone=zone,
                                 capacity_type=capacity, nodepool=kw.get("pool", "shared"),
                                 environment=kw.get("environment", ""))])  # fmt: skip
    backend.update_status(
        [(AppliedRef("v1", "Node", "", name), node_status(cpu=4, memory=16 * 2**30, gpu=0))]
    )


def add_pods(backend, namespace, owner, nodes, labels=None) -> None:
    template = {
        "metadata": {"labels": {"kiln.dev/workload-class": "batch", **(labels or {})}},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m"}}}]},
    }
    for i, node in enumerate(nodes):
        name = f"{owner}-{i}"
        backend.apply([pod_manifest(namespace=namespace, name=name, owner_kind="ReplicaSet",
                                    owner_name=owner, owner_uid=f"uid-{owner}", template=template)])  # fmt: skip
        assert backend.bind_pods([PodBinding(namespace, name, node)]) == 1


def seed_spread(backend) -> None:
    """`shop/lopsided` puts 3 of 4 spot replicas in one capacity pool (at most ceil(4/2) = 2 may);
    `shop/even` spreads its 4 two and two; `lab/theirs` is another team's."""
    own_namespace("shop", "payments")
    own_namespace("lab", "search")
    add_node(backend, "spot-a1", "m6i.large", "us-east-1a", "spot")
    add_node(backend, "spot-a2", "m6i.large", "us-east-1a", "spot")
    add_node(backend, "spot-b", "m5.large", "us-east-1b", "spot")
    add_pods(backend, "shop", "lopsided", ["spot-a1", "spot-a2", "spot-a1", "spot-b"])
    add_pods(backend, "shop", "even", ["spot-a1", "spot-b", "spot-a2", "spot-b"])
    add_pods(backend, "lab", "theirs", ["spot-a1", "spot-a1"])


def test_a_workload_with_more_than_its_share_of_spot_replicas_in_one_pool_is_flagged(cluster):
    seed_spread(cluster)
    spreads = workload_spreads(
        cluster.list("v1", "Node"), cluster.list("v1", "Pod"), visible=lambda pod: True
    )
    by_name = {w.name: w for w in spreads}
    lopsided = by_name["ReplicaSet/lopsided"]
    # r = 4, k = 2 (the default): at most ceil(4 / 2) = 2 per pool; m6i.large/us-east-1a holds 3.
    assert (lopsided.replicas, lopsided.spot_replicas, lopsided.k, lopsided.cap) == (4, 4, 2, 2)
    assert [(p.pool, p.replicas, p.over) for p in lopsided.pools] == [
        ("m6i.large/us-east-1a/spot", 3, True),
        ("m5.large/us-east-1b/spot", 1, False),
    ]
    assert not by_name["ReplicaSet/even"].flagged
    # r = 2 in one pool: ceil(2 / 2) = 1, so 2 there is over as well.
    assert by_name["ReplicaSet/theirs"].flagged
    assert spreads[0].flagged and not spreads[-1].flagged  # flagged first


def test_k_comes_from_the_spread_filters_setting(cluster, settings):
    seed_spread(cluster)
    settings.KILN_SCHEDULER_SPREAD_K = "batch=1"
    spreads = workload_spreads(
        cluster.list("v1", "Node"), cluster.list("v1", "Pod"), visible=lambda pod: True
    )
    lopsided = next(w for w in spreads if w.name == "ReplicaSet/lopsided")
    # k = 1: at most ceil(4 / 1) = 4 per pool; nothing is over.
    assert (lopsided.k, lopsided.cap, lopsided.flagged) == (1, 4, False)


def test_the_scheduler_page_shows_spread_and_frozen_nodes_to_their_teams_only(cluster):
    seed_spread(cluster)
    payments = Team.objects.get_or_create(slug="payments", defaults={"name": "Payments"})[0]
    search = Team.objects.get_or_create(slug="search", defaults={"name": "Search"})[0]
    service = canary_services.service_create(
        actor=ADMIN, team=payments, name="checkout", namespace="shop", sim_traffic_class="steady"
    )
    rollout = canary_services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )
    from canary.services.freeze import FREEZER, rollout_holder

    disruption_freeze_hold(
        holder=rollout_holder(rollout), nodes={"spot-b"}, actor=FREEZER, backend=cluster
    )
    alice = login("alice", "engineer", payments)
    page = alice.get(reverse("scheduler:overview")).content.decode()
    spread = page[page.index('id="spread"') : page.index('id="frozen-section"')]
    assert "shop/ReplicaSet/lopsided" in spread and "too many in one pool" in spread
    assert "× 3" in spread and "(over 2)" in spread
    assert "lab/" not in spread  # another team's workload is not shown
    frozen = page[page.index('id="frozen"') : page.index('id="reclaims"')]
    assert "spot-b" in frozen
    assert f'href="{reverse("canary:rollout-detail", args=[rollout.pk])}"' in frozen
    assert "shop/checkout v1 -&gt; v2" in frozen
    nodes = page[page.index('id="nodes"') :]
    assert (
        'spot-b <span class="badge warn" title="karpenter.sh/do-not-disrupt">frozen</span>' in nodes
    )
    bob = login("bob", "engineer", search)
    theirs = bob.get(reverse("scheduler:overview")).content.decode()
    assert "lab/ReplicaSet/theirs" in theirs
    assert "shop/ReplicaSet/lopsided" not in theirs
    assert "No node is frozen for a rollout or an experiment you may see." in theirs


def test_the_environment_page_lists_its_own_nodes_with_offering_and_pods(
    cluster, django_capture_on_commit_callbacks
):
    team = Team.objects.create(slug="payments", name="Payments")
    alice = login("alice", "engineer", team)
    with django_capture_on_commit_callbacks(execute=True):
        alice.post(reverse("portal:environment-request"), {**FORM, "env_class": "dev"})
    env = Environment.objects.get()
    url = reverse("portal:environment-nodes", args=[env.public_id])
    empty = alice.get(url).content.decode()
    assert 'id="no-nodes"' in empty
    pool = f"kiln-{env.namespace}"
    add_node(cluster, f"{pool}-abcde", "m6i.large", "us-east-1a", "spot", pool=pool,
             environment=env.namespace)  # fmt: skip
    add_node(cluster, "someone-elses", "m6i.large", "us-east-1a", "spot", environment="other")
    add_pods(cluster, env.namespace, "web", [f"{pool}-abcde", f"{pool}-abcde"])
    page = alice.get(url).content.decode()
    row = page[page.index(f"{pool}-abcde") :]
    row = row[: row.index("</tr>")]
    assert "m6i.large" in row and "us-east-1a" in row and "spot" in row
    assert f"{env.namespace}/web-0" in row and "2 pods" in row
    assert "someone-elses" not in page
    assert "1 node, 1 on spot, 2 pods" in page
    detail = alice.get(reverse("portal:environment-detail", args=[env.public_id])).content
    assert f'hx-get="{url}"'.encode() in detail and b'id="tab-nodes"' in detail
    bob = login("bob", "engineer", Team.objects.create(slug="search", name="Search"))
    assert bob.get(url).status_code == 404


def test_what_only_a_platform_admin_can_do_is_told_to_a_platform_admin_only(cluster):
    payments = Team.objects.get_or_create(slug="payments", defaults={"name": "Payments"})[0]
    engineer = login("alice", "engineer", payments).get(reverse("scheduler:overview"))
    assert "No trace replays stored yet." in engineer.content.decode()
    assert "scheduler_replay --store" not in engineer.content.decode()
    root = login("root", "platform-admin", payments).get(reverse("scheduler:overview"))
    assert "scheduler_replay --store" in root.content.decode()
