"""Celery tasks of the scheduler app (thin: call one service)."""

from __future__ import annotations

from celery import shared_task

from kiln.cluster.backends import get_backend
from scheduler import nodesync


@shared_task(name="scheduler.tasks.nodes_resync", ignore_result=True)
def nodes_resync() -> int:
    """Full resync of the node inventory from the configured cluster; returns nodes changed."""
    result = nodesync.cluster_sync(backend=get_backend()).result
    return len(result.created) + len(result.updated) + len(result.deleted)
