"""The move of the chaos tables from canary to the chaos app: state only, no row lost.

A database migrated before the move (chaos in canary's state, rows in `canary_chaos*`)
is migrated forward and every row is read back through the chaos app's models; a fresh
database (the test database itself) reaches the same models with nothing left to migrate.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from canary.chaos.models import ChaosExperiment, ChaosInjection, ChaosLease

BEFORE_THE_MOVE = [("canary", "0004_team_fks_to_kiln")]


def _migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


def _latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _old_rows(old_apps) -> dict[str, object]:
    """Two experiments with their leases and three injections, written through canary's old models."""
    team_model = old_apps.get_model("kiln", "Team")
    experiment_model = old_apps.get_model("canary", "ChaosExperiment")
    lease_model = old_apps.get_model("canary", "ChaosLease")
    injection_model = old_apps.get_model("canary", "ChaosInjection")
    team = team_model.objects.create(slug="payments", name="Payments")
    when = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    ids = [uuid.uuid4(), uuid.uuid4()]
    for n, pk in enumerate(ids):
        experiment_model.objects.create(
            id=pk,
            name=f"abort web {n}",
            team=team,
            namespace="shop",
            selector={"app": "web"},
            service="web.shop.svc.cluster.local",
            fault="http-abort",
            abort_http_status=503,
            percent=50.0,
            duration_seconds=60,
            max_duration_seconds=120,
            max_pods=2,
            status="completed" if n == 0 else "running",
            lease_duration=15.0,
            renew_deadline=10.0,
            retry_period=2.0,
            max_clock_skew=1.0,
            revert_budget=2.0,
            created_by_name="alice",
            started_at=when,
        )
        lease_model.objects.create(
            experiment_id=pk,
            holder="" if n == 0 else "controller-a",
            resource_version=7 + n,
            transitions=2 + n,
            renewals=5,
            acquired_at=when,
            renewed_at=when,
        )
    injection_model.objects.create(
        experiment_id=ids[0],
        holder="controller-a",
        fencing_token=1,
        state="reverted",
        applied=[{"kind": "VirtualService", "name": "chaos-1"}],
        targets=["web"],
        reverted_at=when,
        reverted_by="system:chaos-reaper",
    )
    injection_model.objects.create(
        experiment_id=ids[0], holder="controller-b", fencing_token=2, state="reverted",
        reverted_at=when,
    )  # fmt: skip
    injection_model.objects.create(
        experiment_id=ids[1], holder="controller-a", fencing_token=3, state="active"
    )
    return {"team": team.pk, "experiments": ids}


@pytest.mark.django_db(transaction=True)
def test_an_existing_database_keeps_every_chaos_row_through_the_move():
    content_types = {
        m: ContentType.objects.get(app_label="chaos", model=m).pk
        for m in ("chaosexperiment", "chaoslease", "chaosinjection")
    }
    executor = _migrate(BEFORE_THE_MOVE)
    try:
        old_apps = executor.loader.project_state(BEFORE_THE_MOVE).apps
        with pytest.raises(LookupError):
            old_apps.get_model("chaos", "ChaosExperiment")  # before the move: canary's models
        # Going back moved the content types back to canary, under the same ids.
        assert {
            ct.model: ct.pk
            for ct in ContentType.objects.filter(app_label="canary", model__startswith="chaos")
        } == content_types
        written = _old_rows(old_apps)
    finally:  # forward again whatever happened: the worker's later tests need the schema
        _migrate(_latest())

    ContentType.objects.clear_cache()
    assert ChaosExperiment._meta.app_label == "chaos"
    assert ChaosExperiment._meta.db_table == "canary_chaosexperiment"
    first, second = (ChaosExperiment.objects.get(pk=pk) for pk in written["experiments"])
    assert (first.name, first.status, first.team_id, first.abort_http_status) == (
        "abort web 0",
        "completed",
        written["team"],
        503,
    )
    assert second.status == "running" and second.lease.holder == "controller-a"
    assert ChaosLease.objects.count() == 2
    assert ChaosLease.objects.get(pk=first.pk).resource_version == 7
    assert list(
        ChaosInjection.objects.order_by("fencing_token").values_list(
            "experiment_id", "fencing_token", "state"
        )
    ) == [(first.pk, 1, "reverted"), (first.pk, 2, "reverted"), (second.pk, 3, "active")]
    assert first.injections.get(fencing_token=1).reverted_by == "system:chaos-reaper"
    # The constraint still holds on the moved table: one unreverted injection per experiment.
    assert second.injections.filter(reverted_at__isnull=True).count() == 1
    assert {
        ct.model: ct.pk
        for ct in ContentType.objects.filter(app_label="chaos", model__in=list(content_types))
    } == content_types
    assert not ContentType.objects.filter(app_label="canary", model__startswith="chaos").exists()


@pytest.mark.django_db
def test_a_fresh_database_has_the_chaos_models_and_nothing_left_to_migrate():
    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
    state = executor.loader.project_state()
    assert ("chaos", "chaosexperiment") in state.models
    assert ("canary", "chaosexperiment") not in state.models
    assert state.models["chaos", "chaosinjection"].options["db_table"] == "canary_chaosinjection"
    out = StringIO()
    # The models and the migrations agree: makemigrations would write nothing.
    call_command("makemigrations", "canary", "chaos", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
