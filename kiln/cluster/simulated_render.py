"""How a simulated object reads back: the row rendered as Kubernetes returns an object.

The simulated controllers are lazy: readiness is derived from `ready_at` at read
time, so no loop runs in the background and a crashed process loses nothing.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from django.utils import timezone

from kiln.cluster.models import SimulatedFailure, SimulatedObject


def iso(value: datetime | None) -> str | None:
    """A timestamp as Kubernetes writes it (RFC 3339, seconds, UTC)."""
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def render(obj: SimulatedObject, *, fresh: bool = False) -> dict[str, Any]:
    """The live object: its manifest, server-set metadata and a status derived from the row.

    `fresh`: the row was just read for this call and is dropped after it, so its
    manifest is rendered in place instead of copied (a list of 10,000 pods spends
    more in `deepcopy` than in reading them).
    """
    now = timezone.now()
    body = obj.manifest if fresh else copy.deepcopy(obj.manifest)
    metadata = body.setdefault("metadata", {})
    metadata.update(
        {
            "uid": str(obj.uid),
            "generation": obj.generation,
            "resourceVersion": str(obj.resource_version),
            "creationTimestamp": iso(obj.created_at),
            "finalizers": list(obj.finalizers),
            # Who last applied it and when, as the API server records it (one manager: the
            # simulated cluster keeps the last writer's).
            "managedFields": [
                {
                    "manager": obj.field_manager,
                    "operation": "Apply",
                    "apiVersion": obj.api_version,
                    "time": iso(obj.applied_at or obj.created_at),
                    "fieldsType": "FieldsV1",
                }
            ],
        }
    )
    if obj.namespace:
        metadata["namespace"] = obj.namespace
    if obj.deletion_timestamp:
        metadata["deletionTimestamp"] = iso(obj.deletion_timestamp)
    if obj.failure == SimulatedFailure.DEGRADED:
        ready = ("False", "SimulatedFailure", "the simulated controller reports a failure")
    elif _asleep(obj):
        ready = ("False", "Sleeping", "the control plane runs no replicas")
    elif obj.ready_at is None:
        ready = ("False", "NotReady", "waiting for the controller (never ready)")
    elif obj.ready_at > now:
        ready = ("False", "Progressing", "reconciling")
    else:
        ready = ("True", "Ready", "ready")
    status: dict[str, Any] = {
        "observedGeneration": obj.generation if ready[0] == "True" else obj.generation - 1,
        "conditions": [
            {
                "type": "Ready",
                "status": ready[0],
                "reason": ready[1],
                "message": ready[2],
                "lastTransitionTime": iso(obj.ready_at if ready[0] == "True" else obj.updated_at),
            }
        ],
    }
    if obj.kind == "Namespace":
        status["phase"] = "Terminating" if obj.deletion_timestamp else "Active"
    elif obj.kind == "Pod" and obj.api_version == "v1":
        status["phase"] = "Pending"  # as the API server creates every pod, until it is bound
    status.update(obj.status or {})
    body["status"] = status
    return body


def _asleep(obj: SimulatedObject) -> bool:
    """A TenantControlPlane scaled to zero replicas: asleep, as Kamaji reports it (not Ready)."""
    if obj.kind != "TenantControlPlane":
        return False
    plane = ((obj.manifest.get("spec") or {}).get("controlPlane") or {}).get("deployment") or {}
    return plane.get("replicas") == 0
