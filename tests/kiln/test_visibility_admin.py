"""The Django admin shows what the one visibility rule allows, not what Django's model
permissions would: the audit chain to who may view audit, nodes by the node list's rule."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client

from kiln.cluster.backends import get_backend
from kiln.identity.models import Membership, Team
from scheduler.models import ENVIRONMENT_LABEL
from tests.scheduler.conftest import make_node

pytestmark = pytest.mark.django_db


def staff(username: str, role: str, team: str | None = None, *, superuser: bool = False) -> Client:
    """A signed-in staff account in `role` (and `team`), holding every Django model permission:
    whatever it sees, Django's own permissions did not decide it."""
    user = get_user_model().objects.create_user(username, is_staff=True, is_superuser=superuser)
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    user.user_permissions.set(Permission.objects.all())
    if team:
        Membership.objects.create(user=user, team=Team.objects.get(slug=team))
    client = Client()
    client.force_login(user)
    return client


def test_the_audit_chain_in_the_admin_follows_the_audit_rule():
    admin = staff("vis-root", "platform-admin", superuser=True)
    approver = staff("vis-approver", "approver")
    for url in ("/admin/audit/chainevent/", "/admin/audit/checkpoint/"):
        assert admin.get(url).status_code == 200
        # An approver may use the admin, holds Django's view permission, and still may not read
        # the chain: only auditors and platform admins do.
        assert approver.get(url).status_code == 403


@pytest.fixture
def nodes(settings):
    """A shared node, and one node each of environments of teams alpha and beta."""
    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    backend = get_backend("simulated")
    for slug in ("alpha", "beta"):
        Team.objects.create(slug=slug, name=slug.title())
        backend.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": f"env-{slug}", "labels": {"kiln.dev/team": slug}},
                }
            ]
        )
        node = make_node(f"node-of-{slug}", "on-demand")
        node.labels = {**node.labels, ENVIRONMENT_LABEL: f"env-{slug}"}
        node.save()
    make_node("node-shared", "on-demand")


def listed(client: Client) -> set[str]:
    page = client.get("/admin/scheduler/node/")
    assert page.status_code == 200
    body = page.content.decode()
    return {name for name in ("node-shared", "node-of-alpha", "node-of-beta") if name in body}


def test_the_node_inventory_in_the_admin_follows_the_node_rule(nodes, settings):
    approver = staff("vis-approver", "approver", "alpha")
    assert listed(approver) == {"node-shared", "node-of-alpha"}
    settings.KILN_APPROVERS_GLOBAL = True
    assert listed(approver) == {"node-shared", "node-of-alpha", "node-of-beta"}
    admin = staff("vis-root", "platform-admin", superuser=True)
    assert listed(admin) == {"node-shared", "node-of-alpha", "node-of-beta"}
