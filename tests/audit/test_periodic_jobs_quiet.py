"""A periodic job that changed nothing writes no audit event (DESIGN.md, Observability).

Every entry of the beat schedule runs against the demo's seeded platform (teams, pricing,
services, rollouts, a simulated cluster with its nodes and pods) until it has caught up, then
once more with nothing changed in between: that last run must add no outbox row, or the chain
would grow by a heartbeat. A new beat job is covered the day it joins the schedule.
"""

from __future__ import annotations

import pytest
from django.conf import settings

from audit.models import OutboxEvent
from canary.models import Rollout
from kiln.celery import app
from kiln.cluster.backends import get_backend
from kiln.seed import seed_demo
from scheduler.models import Node, NodeSource
from scheduler.simulation.demo import demo_workload
from tests.scheduler.conftest import cluster_node

pytestmark = pytest.mark.django_db

# A job may have real work the first time (a node to record, a sample to take); it settles
# within this many runs on a platform nobody touches.
SETTLE_RUNS = 3


def _run(task_name: str) -> None:
    """Run the beat entry's task in this process, as the worker would (arguments as scheduled)."""
    app.loader.import_default_modules()  # the apps' task modules, as a worker imports them
    entry = next(e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == task_name)
    app.tasks[task_name].apply(args=entry.get("args", ()), kwargs=entry.get("kwargs", {}))


@pytest.fixture
def seeded(settings):
    settings.KILN_SIM_DELAY_PROFILE = "zero"  # what the cluster does, it does at once
    settings.KILN_SIM_SPOT_RECLAIM_SCALE = 0  # no spot node is reclaimed while the test looks
    settings.KILN_SIM_DEMO_WORKLOAD = True  # the shared NodePools and node agent, as standalone
    seed_demo()
    # A workload in the simulated cluster: its pods wait, Karpenter launches nodes for them and
    # the kube-scheduler binds them, so the syncs and the cluster's jobs have work to settle.
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "payments-quiet"}}
    get_backend().apply([namespace, *demo_workload("payments-quiet")], field_manager="test")


def test_the_schedule_names_the_jobs_this_test_covers():
    # A schedule read wrongly (no entries) would make the test below pass on nothing.
    app.loader.import_default_modules()
    tasks = {e["task"] for e in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"scheduler.tasks.nodes_resync", "scheduler.tasks.cluster_tick"} <= tasks
    assert all(name in app.tasks for name in tasks)


def test_a_periodic_job_run_again_with_nothing_changed_writes_no_audit_event(seeded):
    # One seeded platform for every job (seeding is the slow part); each job settles, then
    # runs once more, and whatever that last run recorded is named in the failure.
    noisy = {}
    for task_name in sorted({e["task"] for e in settings.CELERY_BEAT_SCHEDULE.values()}):
        for _ in range(SETTLE_RUNS):
            _run(task_name)
        before = set(OutboxEvent.objects.values_list("pk", flat=True))
        _run(task_name)
        added = OutboxEvent.objects.exclude(pk__in=before)
        if added.exists():
            noisy[task_name] = list(added.values_list("actor", "action", "target"))
    assert noisy == {}
    # ... and the platform was not empty: the jobs had nodes, pods and rollouts to look at.
    assert Node.objects.filter(source=NodeSource.CLUSTER).exists()
    assert Rollout.objects.exists()


def test_node_sync_after_a_change_is_recorded_then_quiet(seeded):
    """The quiet runs above are not silence for everything: a node added to the cluster is
    recorded by the next sync, and the sync after it records nothing."""
    for _ in range(SETTLE_RUNS):
        _run("scheduler.tasks.nodes_resync")
    cluster_node("ip-quiet-check", "on-demand")
    before = OutboxEvent.objects.count()
    _run("scheduler.tasks.nodes_resync")
    synced = OutboxEvent.objects.filter(action="scheduler.nodes.synced").order_by("-id").first()
    assert OutboxEvent.objects.count() == before + 1
    assert "ip-quiet-check" in synced.data["created"]
    _run("scheduler.tasks.nodes_resync")
    assert OutboxEvent.objects.count() == before + 1
