# ruff: noqa: F811 - fixtures imported from tests/deploy/test_rbac_proof.py are requested by name
"""Disruption freezes through the real `kubernetes` client, under the RBAC deploy/ ships.

The stand-in API server enforces the rendered Roles: the worker (rollout ticks, the chaos
controller) freezes a node with the token of `kiln-worker`, the chaos reaper thaws it with
the token of `kiln-chaos-reaper` once the holder stopped renewing. Not one request may be
refused, and without the rule that grants `patch` on nodes the freeze is a delivery error
naming the verb and the resource.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from kiln.cluster.nodes import A_DO_NOT_DISRUPT, A_FROZEN_BY, annotations_of, node_manifest
from kiln.identity.permissions import system_actor
from scheduler.freezes import Holder, disruption_freeze_hold, disruption_freezes_reap
from scheduler.models import DisruptionFreeze
from tests.deploy.test_rbac_proof import admin, kube, rbac, run_as  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


def holder() -> Holder:
    return Holder(
        kind="experiment", id="e-1", label="abort web", team="payments",
        started_at=timezone.now(), max_seconds=600.0, lease_seconds=2.0,
    )  # fmt: skip


def seed_nodes(kube) -> None:
    admin(kube).apply(
        [
            node_manifest(name=n, instance_type="m6i.xlarge", zone="us-east-1a",
                          capacity_type="on-demand", nodepool="p")
            for n in ("n-1", "n-2")
        ]
    )  # fmt: skip


def test_the_worker_freezes_and_the_chaos_reaper_thaws_under_the_shipped_rbac(
    kube, settings, tmp_path
):
    seed_nodes(kube)
    worker = run_as(kube, settings, tmp_path, "kiln-worker")
    change = disruption_freeze_hold(
        holder=holder(), nodes={"n-1"}, actor=system_actor("chaos-controller"), backend=worker
    )
    assert change.annotated == ["n-1"]
    live = admin(kube).get("v1", "Node", None, "n-1")
    assert annotations_of(live)[A_DO_NOT_DISRUPT] == "true"
    assert annotations_of(live)[A_FROZEN_BY] == "experiment/e-1"
    reaper = run_as(kube, settings, tmp_path, "kiln-chaos-reaper")
    change = disruption_freezes_reap(
        actor=system_actor("chaos-reaper"),
        backend=reaper,
        now=timezone.now() + timedelta(seconds=5),
    )
    assert change.released == ["n-1"] and change.cleared == ["n-1"]
    live = admin(kube).get("v1", "Node", None, "n-1")
    assert A_DO_NOT_DISRUPT not in annotations_of(live) and A_FROZEN_BY not in annotations_of(live)
    assert DisruptionFreeze.objects.get().lifted_at is not None
    assert kube.denied == []
    # Node writes are merge patches of annotations only: nothing else was asked of the server.
    writes = [r for r in kube.requests if r["method"] != "GET" and "/nodes/" in r["path"]]
    patches = [r for r in writes if r["content_type"] == "application/merge-patch+json"]
    assert len(patches) == 2 and all(set(r["body"]) == {"metadata"} for r in patches)


def test_without_the_node_patch_rule_the_freeze_is_not_marked_applied(kube, settings, tmp_path):
    seed_nodes(kube)
    roles = kube.rbac.roles[("ClusterRole", "", "kiln-disruption-freeze")]
    roles[0] = {**roles[0], "verbs": ["get", "list"]}
    worker = run_as(kube, settings, tmp_path, "kiln-worker")
    change = disruption_freeze_hold(
        holder=holder(), nodes={"n-1"}, actor=system_actor("chaos-controller"), backend=worker
    )
    # The intent is kept (the reaper's next pass tries again) but nothing claims it is applied.
    assert change.frozen == ["n-1"] and change.annotated == []
    assert DisruptionFreeze.objects.get().applied_at is None
    assert [(a.verb, a.resource) for a in kube.denied] == [("patch", "nodes")]
    assert A_DO_NOT_DISRUPT not in annotations_of(admin(kube).get("v1", "Node", None, "n-1"))
