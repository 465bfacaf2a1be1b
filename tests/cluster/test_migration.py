"""Moving SimulatedObject and SimulatedFailure from `portal` to `cluster` changed state only: no row lost."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from kiln.cluster.models import SimulatedFailure, SimulatedObject

BEFORE = [("portal", "0005_teams_to_kiln"), ("cluster", None)]


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_move_are_read_by_the_cluster_app_after_it():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)  # back to the state where portal owned the models
    try:
        old = executor.loader.project_state([BEFORE[0]]).apps
        assert not any(m._meta.app_label == "cluster" for m in old.get_models())
        uid = uuid.uuid4()
        now = timezone.now()
        old.get_model("portal", "SimulatedObject").objects.create(
            api_version="v1",
            kind="Namespace",
            name="shop",
            uid=uid,
            manifest={"metadata": {"name": "shop"}},
            created_at=now,
            updated_at=now,
        )
        old.get_model("portal", "SimulatedFailure").objects.create(mode="never_ready", kind="Pod")
        assert ContentType.objects.filter(app_label="portal", model="simulatedobject").exists()
    finally:  # forward again whatever happened: the worker's later tests need the schema
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    new = executor.loader.project_state(executor.loader.graph.leaf_nodes()).apps
    assert {m.__name__ for m in new.get_app_config("cluster").get_models()} == {
        "SimulatedObject",
        "SimulatedFailure",
    }
    assert not any(
        m.__name__.startswith("Simulated") for m in new.get_app_config("portal").get_models()
    )
    # Same tables, same rows, now through the cluster app's models.
    assert SimulatedObject._meta.db_table == "portal_simulatedobject"
    assert SimulatedFailure._meta.db_table == "portal_simulatedfailure"
    row = SimulatedObject.objects.get(uid=uid)
    assert (row.kind, row.name, row.manifest) == (
        "Namespace",
        "shop",
        {"metadata": {"name": "shop"}},
    )
    assert SimulatedFailure.objects.filter(mode="never_ready", kind="Pod").count() == 1
    # Their content types moved too: permissions and admin history stay attached.
    ContentType.objects.clear_cache()
    assert ContentType.objects.get_for_model(SimulatedObject).app_label == "cluster"
    assert not ContentType.objects.filter(app_label="portal", model="simulatedobject").exists()
