"""The simulated workload controllers: Deployments (through ReplicaSets), StatefulSets and Jobs get pods.

What the kube-controller-manager does, through the cluster interface: a
Deployment owns a ReplicaSet named after its pod template's hash, which owns
`replicas` pods (`<replicaset>-<5 chars>`); a StatefulSet owns `<name>-0 ..
<name>-<replicas-1>`; a Job keeps `parallelism` pods until `completions` have
succeeded (a Job pod succeeds `kiln.dev/run-seconds` after it started, when its
template says so). A deleted pod (a chaos pod-kill, an eviction) is replaced
on the next pass; surplus pods are deleted.

A DaemonSet has one pod on every eligible node (`daemon_eligible`: its
nodeSelector and required node affinity hold for the node's labels, and it
tolerates the node's NoSchedule/NoExecute taints), bound by the node's
lifecycle, not by the scheduler: the pod is created and bound to its node
(`bind_pods`) in one step when the node is there, and goes when the node goes
(the pod garbage collector deletes every pod bound to a node that no longer
exists). A node's daemon pods count in what it has requested (packing, cost);
Karpenter sizes new nodes with room for them, and the simulated kube-scheduler
keeps that room on a node whose daemon pods are not bound yet, so a node never
requests more than it has; Workload Commitment leaves them out of its numerator.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import string
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from kiln.cluster import AppliedRef, DeliveryBackend, DeliveryError, ref_of
from kiln.cluster.nodes import (
    SUCCEEDED,
    PodBinding,
    annotations_of,
    is_disrupting,
    labels_of,
    name_of,
    node_list,
    pod_manifest,
    pod_node,
    pod_owner,
    pod_phase,
)
from scheduler.kubefilters import matches_affinity, untolerated_taint

log = logging.getLogger("kiln.scheduler.workloads")
A_RUN_SECONDS = "kiln.dev/run-seconds"
_SUFFIX = string.ascii_lowercase + string.digits


@dataclass
class WorkloadPass:
    """What one pass of the workload controllers did."""

    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    # DaemonSet pods bound to their node on creation ("namespace/name": node).
    daemon_bound: dict[str, str] = field(default_factory=dict)


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
    annotations = annotations_of(pod)
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
            if not _applied(backend, [rs]):  # its namespace is going: nothing to run there
                continue
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
                    _pod_of(
                        sts,
                        "StatefulSet",
                        name,
                        template,
                        {"statefulset.kubernetes.io/pod-name": name},
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
                _pod_of(
                    job, "Job", f"{name_of(job)}-{_suffix()}", template, {"job-name": name_of(job)}
                )
            )
    daemon_creates, bindings, daemon_deletes = _daemon_sets(backend, owned, pods)
    creates += daemon_creates
    deletes += daemon_deletes
    by_namespace: dict[str, list[dict]] = defaultdict(list)
    for manifest in creates:
        by_namespace[_ns(manifest)].append(manifest)
    for pods_of_namespace in by_namespace.values():
        if _applied(backend, pods_of_namespace, field_manager="kube-controller-manager"):
            result.created += [f"{_ns(m)}/{name_of(m)}" for m in pods_of_namespace]
    if bindings:
        backend.bind_pods(bindings)
        result.daemon_bound = {f"{b.namespace}/{b.name}": b.node for b in bindings}
    for pod in deletes:
        if backend.delete(AppliedRef("v1", "Pod", _ns(pod), name_of(pod))):
            result.deleted.append(f"{_ns(pod)}/{name_of(pod)}")
    return result


def _applied(backend: DeliveryBackend, manifests: list[dict], **kw: Any) -> bool:
    """Apply; False when the API server refuses for now (a namespace being deleted takes no new
    objects): a controller logs that and tries again on its next pass, as this one does."""
    try:
        backend.apply(manifests, **kw)
    except DeliveryError as exc:
        if not exc.retryable:
            raise
        log.info("workloads: %s; next pass", exc.message)
        return False
    return True


def _pod_of(
    owner: dict[str, Any],
    kind: str,
    name: str,
    template: dict[str, Any],
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod `name` made from `template`, owned by the workload object `owner` of `kind`."""
    return pod_manifest(
        namespace=_ns(owner),
        name=name,
        owner_kind=kind,
        owner_name=name_of(owner),
        owner_uid=_uid(owner),
        template=template,
        labels=labels,
    )


def daemon_eligible(template_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether a DaemonSet's pod belongs on `node`: selector and required affinity hold for its
    labels, its NoSchedule/NoExecute taints are tolerated, and Karpenter is not draining it."""
    taints = (node.get("spec") or {}).get("taints") or []
    return (
        not is_disrupting(node)
        and matches_affinity(labels_of(node), template_spec)
        and untolerated_taint(template_spec.get("tolerations") or [], taints) is None
    )


def _daemon_sets(
    backend: DeliveryBackend, owned: dict[tuple[str, str, str], list[dict]], pods: list[dict]
) -> tuple[list[dict], list[PodBinding], list[dict]]:
    """Pods to create (and their bindings) so every eligible node runs each DaemonSet once, and
    pods to delete: a DaemonSet's surplus or ineligible pods, and every pod on a node that is gone."""
    creates: list[dict] = []
    bindings: list[PodBinding] = []
    deletes: list[dict] = []
    nodes = node_list(backend, include_deleting=True)
    existing = {name_of(n) for n in nodes}
    live = [n for n in nodes if not (n.get("metadata") or {}).get("deletionTimestamp")]
    # A node being drained or deleted keeps the daemon pods it has until it goes.
    draining = existing - {name_of(n) for n in live} | {
        name_of(n) for n in live if is_disrupting(n)
    }
    # The pod garbage collector: a pod bound to a node that no longer exists goes.
    deletes.extend(p for p in pods if pod_node(p) and pod_node(p) not in existing)
    for ds in backend.list("apps/v1", "DaemonSet", include_deleting=False):
        template = (ds.get("spec") or {}).get("template") or {}
        spec = template.get("spec") or {}
        have: dict[str, list[dict]] = defaultdict(list)
        for pod in owned.get((_ns(ds), "DaemonSet", name_of(ds)), []):
            have[pod_node(pod)].append(pod)
        eligible = {name_of(n) for n in live if daemon_eligible(spec, n)}
        for node in sorted(eligible - set(have)):
            name = f"{name_of(ds)}-{_suffix()}"
            pod = _pod_of(ds, "DaemonSet", name, template)
            pod["spec"]["affinity"] = _on_node(spec, node)
            creates.append(pod)
            bindings.append(PodBinding(_ns(ds), name, node))
        for node, on_node in have.items():
            keep = 1 if node in eligible or node in draining else 0
            deletes.extend(sorted(on_node, key=name_of)[keep:])
    # A DaemonSet that is gone takes its pods along.
    sets = {(_ns(d), name_of(d)) for d in backend.list("apps/v1", "DaemonSet")}
    for (ns, kind, owner), on in owned.items():
        if kind == "DaemonSet" and (ns, owner) not in sets:
            deletes.extend(on)
    return creates, bindings, _unique(deletes)


def _on_node(spec: dict[str, Any], node: str) -> dict[str, Any]:
    """The template's affinity with the DaemonSet controller's term pinning the pod to `node`
    (required node affinity on `metadata.name`), so no scheduler could place it elsewhere."""
    affinity = dict(spec.get("affinity") or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }
    affinity["nodeAffinity"] = node_affinity
    return affinity


def _unique(pods: list[dict]) -> list[dict]:
    seen: set[tuple[str, str]] = set()
    out = []
    for pod in pods:
        key = (_ns(pod), name_of(pod))
        if key not in seen:
            seen.add(key)
            out.append(pod)
    return out
