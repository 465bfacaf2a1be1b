"""Sleeping's view of the manifests: what changes while an environment sleeps, and what it keeps.

Asleep, an environment's tenant control plane runs no replicas (Kamaji reports it `Sleeping`)
and its NodePool may launch nothing (limits zero; Karpenter then removes the empty nodes); its
namespace, quota, policies, Secrets, persistent volumes and database claim are untouched. Waking
applies the composed manifests as they are, so it restores exactly what sleeping changed.
The team's own workloads are scaled through the cluster (their replicas are not Kiln's to
compose). No Django.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

SLEEPING_KINDS = ("TenantControlPlane", "NodePool")
# The workloads scaled to zero and back: the kinds with a `scale` subresource a team runs.
SCALED_RESOURCES = (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"))


def asleep(manifests: Sequence[dict]) -> list[dict]:
    """The manifests that put an environment's capacity to sleep: the control plane at zero
    replicas, the NodePool's limits at zero; nothing else."""
    out: list[dict] = []
    for manifest in manifests:
        if manifest["kind"] == "TenantControlPlane":
            plane = copy.deepcopy(manifest)
            plane["spec"]["controlPlane"]["deployment"]["replicas"] = 0
            out.append(plane)
        elif manifest["kind"] == "NodePool":
            pool = copy.deepcopy(manifest)
            pool["spec"]["limits"] = {"cpu": "0", "memory": "0Gi"}
            out.append(pool)
    return out


def awake(manifests: Sequence[dict]) -> list[dict]:
    """The composed manifests sleeping changed, as composed (what waking applies)."""
    return [copy.deepcopy(m) for m in manifests if m["kind"] in SLEEPING_KINDS]
