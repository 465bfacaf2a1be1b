"""The environment page's Resources tab: its objects as a tree, read through the cluster interface."""

from __future__ import annotations

import pytest
from django.urls import reverse

from kiln.cluster import AppliedRef
from kiln.cluster.backends import get_backend
from kiln.identity.models import Team
from portal.models import Environment
from portal.resource_tree import environment_tree
from tests.portal.test_pages import FORM, login

pytestmark = pytest.mark.django_db


@pytest.fixture
def ready_env(django_capture_on_commit_callbacks) -> tuple:
    team = Team.objects.create(slug="payments", name="Payments")
    alice = login("alice", "engineer", team)
    with django_capture_on_commit_callbacks(execute=True):
        alice.post(reverse("portal:environment-request"), {**FORM, "env_class": "dev"})
    env = Environment.objects.get()
    assert env.status == "READY"
    return alice, env


def test_the_tree_puts_the_namespace_at_the_root_with_every_object_under_it(ready_env):
    _, env = ready_env
    tree = environment_tree(env)
    assert tree.error == ""
    (root,) = [n for n in tree.roots if n.state.ref.kind == "Namespace"]
    assert root.state.ref.name == env.namespace
    kinds = {c.state.ref.kind for c in root.children}
    assert {"ResourceQuota", "LimitRange", "NetworkPolicy", "RoleBinding"} <= kinds
    every = [root, *root.children, *[n for n in tree.roots if n is not root]]
    assert len(every) == len(env.applied_refs)
    assert all(n.state.sync.value == "Synced" for n in every)
    assert all(n.state.events for n in every)


def test_an_object_removed_from_the_cluster_shows_missing_and_out_of_sync(ready_env):
    alice, env = ready_env
    quota = next(r for r in env.applied_refs if r["kind"] == "ResourceQuota")
    ref = AppliedRef.from_dict(quota)
    backend = get_backend()
    backend.delete(ref)
    backend.clear_finalizers(ref)
    page = alice.get(reverse("portal:environment-tree", args=[env.public_id]))
    assert page.status_code == 200
    text = page.content.decode()
    row = text[text.index(f'data-name="{ref.name}"') :]
    row = row[: row.index("</li>")]
    assert "Missing" in row and "OutOfSync" in row and "not in the cluster" in row


def test_the_tree_partial_is_polled_from_the_detail_page_and_hidden_from_other_teams(ready_env):
    alice, env = ready_env
    detail = alice.get(reverse("portal:environment-detail", args=[env.public_id]))
    url = reverse("portal:environment-tree", args=[env.public_id])
    assert f'hx-get="{url}"'.encode() in detail.content
    assert b"every 5s" in detail.content
    bob = login("bob", "engineer", Team.objects.create(slug="search", name="Search"))
    assert bob.get(url).status_code == 404
