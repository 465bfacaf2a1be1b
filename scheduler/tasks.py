"""Celery tasks of the scheduler app (thin: call one service)."""

from __future__ import annotations

import time

from celery import shared_task
from django.conf import settings
from kubernetes import client, config

from scheduler import nodesync


@shared_task(name="scheduler.tasks.nodes_resync", ignore_result=True)
def nodes_resync() -> int:
    """Full resync of the node inventory from the configured source; returns nodes changed."""
    source = settings.KILN_SCHEDULER_NODE_SOURCE
    if source == "simulated":
        result = nodesync.simulated_sync(int(time.time() // settings.KILN_SCHEDULER_SYNC_SECONDS))
    elif source == "kubernetes":
        config.load_config()
        result = nodesync.KubernetesNodeSource(client.ApiClient()).sync()
    else:
        return 0
    return len(result.created) + len(result.updated) + len(result.deleted)
