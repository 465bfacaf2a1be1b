"""Portal fixtures: teams, people per role, eager Celery, a zero-delay simulated cluster, a private audit stream."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from kiln.identity.models import Membership, Team
from kiln.identity.permissions import APPROVER, ENGINEER, PLATFORM_ADMIN, Actor
from tests.audit.conftest import wipe_chain
from tests.support.celery_conf import celery_conf


@pytest.fixture(autouse=True)
def portal_settings(settings, tmp_path: Path):
    tag = uuid.uuid4().hex[:10]
    settings.KILN_AUDIT_STREAM = f"kiln:audit:test:{tag}"
    settings.KILN_AUDIT_GROUP = f"writers-{tag}"
    settings.KILN_AUDIT_SIGNING_KEY = str(tmp_path / "audit" / "checkpoint-key.pem")
    settings.KILN_AUDIT_SIGNING_KEY_IS_DEV = True
    settings.KILN_AUDIT_ANCHORS = f"dir:{tmp_path / 'anchor'}"
    settings.KILN_AUDIT_RELAY_ON_COMMIT = False
    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    settings.KILN_GITOPS_REPO = str(tmp_path / "gitops.git")
    with celery_conf(task_always_eager=True):
        yield settings


@pytest.fixture
def api(api_client_for, db):
    """api_client_for, with the teams payments and search."""
    Team.objects.create(slug="payments", name="Payments")
    Team.objects.create(slug="search", name="Search")
    return api_client_for


@pytest.fixture
def teams(db) -> dict[str, Team]:
    return {
        slug: Team.objects.create(slug=slug, name=slug.title()) for slug in ("payments", "search")
    }


def make_person(username: str, roles: set[str], team: Team | None) -> Actor:
    user = get_user_model().objects.create_user(username)  # no password: hashing is slow
    if team is not None:
        Membership.objects.create(user=user, team=team)
    return Actor(
        username=username,
        roles=frozenset(roles),
        teams=frozenset({team.slug} if team else set()),
        user_id=user.pk,
    )


@pytest.fixture
def people(teams) -> dict[str, Actor]:
    return {
        "alice": make_person("alice", {ENGINEER}, teams["payments"]),
        "bob": make_person("bob", {ENGINEER}, teams["search"]),
        "carol": make_person("carol", {APPROVER}, teams["payments"]),
        "dave": make_person("dave", {APPROVER}, teams["payments"]),
        "erin": make_person("erin", {APPROVER, ENGINEER}, teams["payments"]),
        "root": make_person("root", {PLATFORM_ADMIN}, None),
    }


def request_data(**overrides) -> dict:
    data = {
        "team": "payments",
        "name": "checkout",
        "env_class": "dev",
        "ttl_hours": 48,
        "workload_class": "standard",
        "cpu": 4,
        "memory_gib": 16,
        "gpu": 0,
        "tenant_control_plane": False,
        "spot_node_pool": False,
        "database": False,
        "justification": "",
    }
    data.update(overrides)
    return data


def drain_audit() -> None:
    """Publish the outbox and chain everything pending, as the audit writer does."""
    from audit.chain.writer import AuditWriter

    AuditWriter(block_ms=0).run_once()


@pytest.fixture
def chain_emptied_afterwards(transactional_db):
    """The flush after a transactional test cannot TRUNCATE the chain: empty it first."""
    yield
    wipe_chain()
