"""Reads whose cost must not grow with history: PostgreSQL plans them on their indexes once the
tables hold more than a handful of rows (a staging plan's previous version among a team's
environments; the simulated cluster's deleting objects among all of its objects)."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.utils import timezone

from kiln.cluster.models import SimulatedObject
from kiln.cluster.simulated import SimulatedBackend
from portal.models import Environment, EnvironmentRequest
from portal.services import environment_request_submit
from portal.services.plan import earlier_versions, environment_plan
from tests.portal.conftest import request_data

pytestmark = pytest.mark.django_db
HISTORY = 600


def _analyze(table: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")  # noqa: S608 - the test's own table names


def _history(team, requester, manifests) -> None:
    """HISTORY earlier environments of the team under other names, each with manifests."""
    requests = EnvironmentRequest.objects.bulk_create(
        EnvironmentRequest(
            team=team, name=f"old-{i}", env_class="staging", ttl_hours=1, workload_class="standard",
            cpu=1, memory_gib=1, requested_by_id=requester,
        )
        for i in range(HISTORY)
    )  # fmt: skip
    Environment.objects.bulk_create(
        Environment(
            public_id=f"env_old{i}", request=r, team=team, name=r.name,
            namespace=f"{team.slug}-old-{i}", env_class="staging", status="DELETED",
            manifests=manifests,
        )
        for i, r in enumerate(requests)
    )  # fmt: skip


def test_a_staging_plans_previous_version_is_read_from_its_index(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging", name="web")
    )
    assert env.manifests, "a staging request is planned at submission"
    _history(env.team, people["alice"].user_id, env.manifests)
    _analyze("portal_environment")
    plan = earlier_versions(env).explain()
    assert "portal_env_team_name_created" in plan, plan
    assert "Seq Scan" not in plan, plan
    # The plan still finds what it looks for: none of the history shares the name.
    assert environment_plan(environment=env).previous is None


def test_the_simulated_clusters_deleting_objects_are_read_from_their_index():
    now = timezone.now()
    SimulatedObject.objects.bulk_create(
        SimulatedObject(
            api_version="v1", kind="ConfigMap", namespace=f"ns-{i % 30}", name=f"cm-{i}",
            uid=uuid.uuid4(), created_at=now, updated_at=now, ready_at=now,
            deletion_timestamp=now if i % 100 == 0 else None,
            finalizers_clear_at=now if i % 100 == 0 else None,
        )
        for i in range(HISTORY)
    )  # fmt: skip
    _analyze("portal_simulatedobject")
    due = SimulatedBackend().deleting_due(now)
    plan = due.explain()
    assert "portal_simobject_deleting" in plan, plan
    assert due.count() == HISTORY // 100
