"""The simulated cluster's scale subresource: a workload's `spec.replicas` set under its row lock."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from kiln.cluster.base import AppliedRef
from kiln.cluster.simulated_failures import ready_delay
from kiln.cluster.simulated_rows import locked_row


def scale_one(*, cluster: str, ref: AppliedRef, replicas: int) -> int | None:
    """Set the workload's `spec.replicas` under its row lock, as the scale subresource does: a
    new generation, and Ready again only once the controller has rolled it (the kind's delay).
    Returns the replicas it had (1 when unset, the API server's default), None if it is gone."""
    with transaction.atomic():
        obj = locked_row(cluster=cluster, ref=ref, live_only=True)
        if obj is None:
            return None
        spec = dict(obj.manifest.get("spec") or {})
        before = spec.get("replicas", 1)
        before = before if isinstance(before, int) and not isinstance(before, bool) else 1
        if before != replicas:
            now = timezone.now()
            obj.manifest = {**obj.manifest, "spec": {**spec, "replicas": int(replicas)}}
            obj.resource_version += 1
            obj.generation += 1
            obj.updated_at = now
            if not obj.failure:
                obj.ready_at = now + timedelta(seconds=ready_delay(ref.kind))
            obj.save(
                update_fields=[
                    "manifest",
                    "resource_version",
                    "generation",
                    "updated_at",
                    "ready_at",
                ]
            )
    return before
