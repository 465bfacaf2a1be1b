"""Celery tasks of the scheduler app (thin: call one service)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from kiln.cluster.backends import get_backend
from scheduler import freezes, nodesync
from scheduler.simulation import cluster_tick as _cluster_tick


@shared_task(name="scheduler.tasks.nodes_resync", ignore_result=True)
def nodes_resync() -> int:
    """Full resync of the node inventory from the configured cluster; returns nodes changed."""
    result = nodesync.cluster_sync(backend=get_backend()).result
    return len(result.created) + len(result.updated) + len(result.deleted)


@shared_task(name="scheduler.tasks.cluster_tick", ignore_result=True)
def cluster_tick() -> int:
    """One round of the simulated cluster's Karpenter, kube-scheduler and reclaims; returns pods bound."""
    report = _cluster_tick(backend=get_backend(), seconds=settings.KILN_SIM_CLUSTER_TICK_SECONDS)
    return int(report.get("bound", 0))


@shared_task(name="scheduler.tasks.disruption_freezes_reap", ignore_result=True)
def disruption_freezes_reap() -> int:
    """Release freezes whose holder is gone or past their bound; make the nodes match."""
    change = freezes.disruption_freezes_reap(backend=get_backend())
    return len(change.released) + len(change.cleared)
