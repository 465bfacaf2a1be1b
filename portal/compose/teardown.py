"""Teardown's view of the manifests: the kinds removed first, the workload resources listed in
the namespace, and the manifests that cordon an environment. No Django."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

# Kinds removed first in teardown (they run or own workloads), before the control plane and namespace.
WORKLOAD_KINDS = ("Application", "PostgreSQLInstance", "NodePool")
# Removed last, with the namespace: the control plane and its cluster-scoped flow control (the
# namespace does not take cluster-scoped objects with it).
CONTROL_PLANE_KINDS = ("TenantControlPlane", "FlowSchema", "PriorityLevelConfiguration")
WORKLOAD_RESOURCES = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("batch/v1", "Job"),
    ("v1", "Pod"),
)


def cordon(manifests: Sequence[dict]) -> list[dict]:
    """The manifests that stop new work: NodePool limits to zero, quota to zero pods."""
    out: list[dict] = []
    for manifest in manifests:
        if manifest["kind"] == "NodePool":
            pool = _copy(manifest)
            pool["spec"]["limits"] = {"cpu": "0", "memory": "0Gi"}
            out.append(pool)
        elif manifest["kind"] == "ResourceQuota":
            quota = _copy(manifest)
            quota["spec"]["hard"]["pods"] = "0"
            out.append(quota)
    return out


def _copy(value: Any) -> Any:
    return copy.deepcopy(value)
