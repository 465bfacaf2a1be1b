"""The simulated workload controllers: Deployments (through ReplicaSets), StatefulSets and Jobs get pods.

What the kube-controller-manager does, through the cluster interface: a
Deployment owns a ReplicaSet named after its pod template's hash, which owns
`replicas` pods (`<replicaset>-<5 chars>`); a StatefulSet owns `<name>-0 ..
<name>-<replicas-1>`; a Job keeps `parallelism` pods until `completions` have
succeeded (a Job pod succeeds `kiln.dev/run-seconds` after it started, when its
template says so). A deleted pod (a chaos pod-kill, an eviction) is replaced
on the next pass; surplus pods are deleted.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import string
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from kiln.cluster import AppliedRef, DeliveryBackend, ref_of
from kiln.cluster.nodes import (
    SUCCEEDED,
    name_of,
    pod_manifest,
    pod_owner,
    pod_phase,
)

A_RUN_SECONDS = "kiln.dev/run-seconds"
_SUFFIX = string.ascii_lowercase + string.digits


@dataclass
class WorkloadPass:
    """What one pass of the workload controllers did."""

    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)


def _suffix(n: int = 5) -> str:
    return "".join(secrets.choice(_SUFFIX) for _ in range(n))


def template_hash(template: dict[str, Any]) -> str:
    """A short, stable hash of a pod template (as the Deployment controller names ReplicaSets)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return digest[:10]


def _uid(obj: dict[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("uid", "")


def _ns(obj: dict[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("namespace", "")


def _replicas(obj: dict[str, Any], key: str = "replicas") -> int:
    value = (obj.get("spec") or {}).get(key, 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def _replica_set(deployment: dict[str, Any]) -> dict[str, Any]:
    template = (deployment.get("spec") or {}).get("template") or {}
    name = f"{name_of(deployment)}-{template_hash(template)}"
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": _ns(deployment),
            "labels": dict((template.get("metadata") or {}).get("labels") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": name_of(deployment),
                    "uid": _uid(deployment),
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": _replicas(deployment), "template": template},
    }


def _finished(pod: dict[str, Any], now: datetime) -> bool:
    """A running Job pod whose template asks to finish after kiln.dev/run-seconds has done so."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        seconds = float(annotations.get(A_RUN_SECONDS, ""))
    except ValueError:
        return False
    created = parse_datetime((pod.get("metadata") or {}).get("creationTimestamp") or "")
    return (
        pod_phase(pod) == "Running"
        and created is not None
        and now - created >= timedelta(seconds=seconds)
    )


def workloads_reconcile(*, backend: DeliveryBackend) -> WorkloadPass:
    """Create and delete pods until every Deployment, StatefulSet and Job has what it asks for."""
    result = WorkloadPass()
    now = timezone.now()
    pods = backend.list("v1", "Pod", include_deleting=False)
    owned: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for pod in pods:
        kind, owner = pod_owner(pod)
        owned[(_ns(pod), kind, owner)].append(pod)
    finished = [p for p in pods if pod_owner(p)[0] == "Job" and _finished(p, now)]
    if finished:
        backend.update_status(
            [(ref_of(p), {**(p.get("status") or {}), "phase": SUCCEEDED}) for p in finished]
        )
        result.completed = [f"{_ns(p)}/{name_of(p)}" for p in finished]
        for p in finished:
            p["status"] = {**(p.get("status") or {}), "phase": SUCCEEDED}
    creates: list[dict] = []
    deletes: list[dict] = []

    live_sets = []
    for deployment in backend.list("apps/v1", "Deployment", include_deleting=False):
        rs = _replica_set(deployment)
        live_sets.append(rs)
        existing = backend.get("apps/v1", "ReplicaSet", _ns(rs), name_of(rs))
        if (
            existing is None
            or (existing.get("spec") or {}).get("replicas") != rs["spec"]["replicas"]
        ):
            backend.apply([rs])
            existing = backend.get("apps/v1", "ReplicaSet", _ns(rs), name_of(rs))
        have = owned.get((_ns(rs), "ReplicaSet", name_of(rs)), [])
        template = rs["spec"]["template"]
        for _ in range(rs["spec"]["replicas"] - len(have)):
            creates.append(
                pod_manifest(
                    namespace=_ns(rs),
                    name=f"{name_of(rs)}-{_suffix()}",
                    owner_kind="ReplicaSet",
                    owner_name=name_of(rs),
                    owner_uid=_uid(existing or {}),
                    template=template,
                )
            )
        deletes.extend(sorted(have, key=name_of)[rs["spec"]["replicas"] :])
    # Pods of a ReplicaSet no Deployment wants any more (its template changed, or it is gone).
    wanted = {(_ns(rs), name_of(rs)) for rs in live_sets}
    for (ns, kind, owner), have in owned.items():
        if kind == "ReplicaSet" and (ns, owner) not in wanted:
            deletes.extend(have)

    for sts in backend.list("apps/v1", "StatefulSet", include_deleting=False):
        have = {name_of(p) for p in owned.get((_ns(sts), "StatefulSet", name_of(sts)), [])}
        template = (sts.get("spec") or {}).get("template") or {}
        n = _replicas(sts)
        for ordinal in range(n):
            name = f"{name_of(sts)}-{ordinal}"
            if name not in have:
                creates.append(
                    pod_manifest(
                        namespace=_ns(sts),
                        name=name,
                        owner_kind="StatefulSet",
                        owner_name=name_of(sts),
                        owner_uid=_uid(sts),
                        template=template,
                        labels={"statefulset.kubernetes.io/pod-name": name},
                    )
                )
        deletes.extend(
            p
            for p in owned.get((_ns(sts), "StatefulSet", name_of(sts)), [])
            if int(name_of(p).rsplit("-", 1)[-1] or 0) >= n
        )

    for job in backend.list("batch/v1", "Job", include_deleting=False):
        spec = job.get("spec") or {}
        have = owned.get((_ns(job), "Job", name_of(job)), [])
        done = sum(1 for p in have if pod_phase(p) == SUCCEEDED)
        active = [p for p in have if pod_phase(p) != SUCCEEDED]
        completions = _replicas(job, "completions")
        room = min(_replicas(job, "parallelism"), max(0, completions - done)) - len(active)
        template = spec.get("template") or {}
        for _ in range(room):
            creates.append(
                pod_manifest(
                    namespace=_ns(job),
                    name=f"{name_of(job)}-{_suffix()}",
                    owner_kind="Job",
                    owner_name=name_of(job),
                    owner_uid=_uid(job),
                    template=template,
                    labels={"job-name": name_of(job)},
                )
            )
    if creates:
        backend.apply(creates, field_manager="kube-controller-manager")
        result.created = [f"{_ns(m)}/{name_of(m)}" for m in creates]
    for pod in deletes:
        if backend.delete(AppliedRef("v1", "Pod", _ns(pod), name_of(pod))):
            result.deleted.append(f"{_ns(pod)}/{name_of(pod)}")
    return result
