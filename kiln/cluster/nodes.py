"""Nodes and pods as objects of the cluster: their labels, the manifests Kiln's controllers write, and reads.

Pure apart from the `DeliveryBackend` it is handed (no Django, no model), so the
simulated Karpenter and kube-scheduler (scheduler/cluster/) and every reader
(node sync, the scheduler page, the API) share one reading of the shape:

- a Node is `v1 Node`, cluster-scoped, labelled with its instance type, zone,
  capacity type (`spot` | `on-demand`) and NodePool, plus `kiln.dev/environment`
  when an environment's NodePool launched it; `status.allocatable` holds `cpu`,
  `memory` and `nvidia.com/gpu` quantities; `spec.taints` as Kubernetes has them;
- a Pod is `v1 Pod` in an environment namespace with `metadata.ownerReferences`
  (ReplicaSet, StatefulSet, Job or DaemonSet), the `kiln.dev/workload-class`
  label, container requests, `spec.nodeName` once bound, `status.phase`, and a
  `PodScheduled` condition (`Unschedulable` with kube-scheduler's message when it
  cannot be placed); the extender's score explanation is the JSON annotation
  `kiln.dev/score-explanation`.

docs/cluster.md ("Nodes and pods") has the contract with examples.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import orjson

from kiln.cluster.base import PodBinding
from kiln.cluster.protocol import DeliveryBackend

__all__ = ["PodBinding"]  # the protocol's type, re-exported beside the shape it binds

L_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
L_ZONE = "topology.kubernetes.io/zone"
L_CAPACITY_TYPE = "karpenter.sh/capacity-type"
L_NODEPOOL = "karpenter.sh/nodepool"
L_ENVIRONMENT = "kiln.dev/environment"
L_WORKLOAD_CLASS = "kiln.dev/workload-class"
L_HOSTNAME = "kubernetes.io/hostname"
L_OS = "kubernetes.io/os"
# On a tenant control plane's pods in the shared management namespace: `<namespace>.<name>` of
# the TenantControlPlane they serve, so the pods are shown to that namespace's team.
L_TENANT_CONTROL_PLANE = "kiln.dev/tenant-control-plane"
A_SCORE_EXPLANATION = "kiln.dev/score-explanation"
# Karpenter's own marks: the taint it puts on a node it is disrupting (spot notice, expiry,
# consolidation), so nothing new lands there while it drains.
DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
A_RECLAIM_AT = "kiln.dev/reclaim-at"  # when a noticed spot node goes (RFC 3339)
# Karpenter leaves a node carrying this ("true") out of voluntary disruption (consolidation,
# drift; expiry until the NodePool's terminationGracePeriod has passed too). Kiln sets it on the
# nodes its rollouts and chaos experiments work on, with the holders beside it.
A_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
A_FROZEN_BY = "kiln.dev/frozen-by"  # "<kind>/<id>,...": the holders of Kiln's freeze of a node
A_EMPTY_SINCE = "kiln.dev/empty-since"  # since when a node holds no workload pod

GPU_RESOURCE = "nvidia.com/gpu"
SPOT, ON_DEMAND = "spot", "on-demand"
PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})
UNSCHEDULABLE = "Unschedulable"
OWNER_KINDS = {
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "Job": "batch/v1",
    "DaemonSet": "apps/v1",
}


def cpu_quantity(cores: float | Decimal) -> str:
    """Cores as a Kubernetes quantity in millicores ("3920m")."""
    return f"{int(round(float(cores) * 1000))}m"


def node_manifest(
    *,
    name: str,
    instance_type: str,
    zone: str,
    capacity_type: str,
    nodepool: str,
    environment: str = "",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A `v1 Node` as Karpenter's NodeClaim registers it (status is written separately)."""
    all_labels = {
        **(labels or {}),
        L_INSTANCE_TYPE: instance_type,
        L_ZONE: zone,
        L_CAPACITY_TYPE: capacity_type,
        L_NODEPOOL: nodepool,
        L_HOSTNAME: name,
        L_OS: "linux",
    }
    if environment:
        all_labels[L_ENVIRONMENT] = environment
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": dict(annotations or {})},
        "spec": {"providerID": f"kiln-sim:///{zone}/{name}", "taints": list(taints or [])},
    }


def node_status(*, cpu: float, memory: int, gpu: int) -> dict[str, Any]:
    """A Ready node's status with `capacity` and `allocatable` (cores, bytes, GPUs)."""
    resources = {"cpu": cpu_quantity(cpu), "memory": str(int(memory)), GPU_RESOURCE: str(int(gpu))}
    return {
        "capacity": dict(resources),
        "allocatable": dict(resources),
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
            }
        ],
    }


def pod_manifest(
    *,
    namespace: str,
    name: str,
    owner_kind: str,
    owner_name: str,
    owner_uid: str,
    template: dict[str, Any],
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A `v1 Pod` made from a workload's pod template, owned as its controller would own it."""
    template_meta = template.get("metadata") or {}
    spec = dict(template.get("spec") or {})
    spec.pop("nodeName", None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(template_meta.get("labels") or {}), **(labels or {})},
            "annotations": dict(template_meta.get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": OWNER_KINDS[owner_kind],
                    "kind": owner_kind,
                    "name": owner_name,
                    "uid": owner_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def unschedulable_status(message: str) -> dict[str, Any]:
    """A Pending pod's status with kube-scheduler's `PodScheduled=False, Unschedulable` condition."""
    return {
        "phase": PENDING,
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": UNSCHEDULABLE, "message": message}
        ],
    }


def explanation_annotation(explanation: dict[str, Any]) -> dict[str, str]:
    """The score explanation as the pod annotation the scheduler page reads: compact JSON with
    sorted keys (orjson: the standard library's encoder was a twentieth of the simulated
    kube-scheduler's busy time, once a pod)."""
    return {A_SCORE_EXPLANATION: orjson.dumps(explanation, option=orjson.OPT_SORT_KEYS).decode()}


# --- reading the shape --------------------------------------------------------------------


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    """An object's labels ({} when absent)."""
    return (obj.get("metadata") or {}).get("labels") or {}


def name_of(obj: dict[str, Any]) -> str:
    """An object's metadata.name."""
    return (obj.get("metadata") or {}).get("name", "")


def is_disrupting(node: dict[str, Any]) -> bool:
    """True once Karpenter tainted the node `karpenter.sh/disrupted` to drain it."""
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == DISRUPTED_TAINT["key"] for t in taints)


def annotations_of(obj: dict[str, Any] | None) -> dict[str, str]:
    """An object's annotations ({} when absent)."""
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def json_annotation(annotations: Mapping[str, str], key: str) -> Any:
    """The JSON value of one annotation; None when it is absent or is not JSON."""
    raw = annotations.get(key)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def dicts_in(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list; none when the value is not a list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def is_frozen(node: dict[str, Any]) -> bool:
    """True while the node carries `karpenter.sh/do-not-disrupt: "true"`."""
    return annotations_of(node).get(A_DO_NOT_DISRUPT) == "true"


def pod_phase(pod: dict[str, Any]) -> str:
    """The pod's phase; Pending when the status does not say."""
    return (pod.get("status") or {}).get("phase") or PENDING


def pod_node(pod: dict[str, Any]) -> str:
    """The node the pod is bound to, "" while unbound."""
    return (pod.get("spec") or {}).get("nodeName") or ""


def live_pod_node(pod: dict[str, Any]) -> str:
    """The node a pod holds resources on: its node while bound and not finished, else ""."""
    return "" if pod_phase(pod) in TERMINAL_PHASES else pod_node(pod)


def pod_owner(pod: dict[str, Any]) -> tuple[str, str]:
    """(kind, name) of the pod's controller, ("", "") for a bare pod."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("kind", ""), ref.get("name", "")
    return "", ""


def is_daemon_pod(pod: dict[str, Any]) -> bool:
    """True for a DaemonSet's pod (Workload Commitment leaves these out of its numerator)."""
    return pod_owner(pod)[0] == "DaemonSet"


def pod_scheduled_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's PodScheduled condition, if any."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition
    return None


def score_explanation(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The extender's explanation of the pod's placement (None if it has none or it is unreadable)."""
    value = json_annotation(annotations_of(pod), A_SCORE_EXPLANATION)
    return value if isinstance(value, dict) else None


def _selector(**terms: str | None) -> str | None:
    parts = [f"{key}={value}" for key, value in terms.items() if value]
    return ",".join(parts) or None


def node_list(
    backend: DeliveryBackend,
    *,
    nodepool: str | None = None,
    environment: str | None = None,
    capacity_type: str | None = None,
    include_deleting: bool = False,
) -> list[dict[str, Any]]:
    """The cluster's Nodes, by name, optionally of one NodePool, environment or capacity type."""
    selector = _selector(
        **{L_NODEPOOL: nodepool, L_ENVIRONMENT: environment, L_CAPACITY_TYPE: capacity_type}
    )
    return backend.list("v1", "Node", None, selector, include_deleting=include_deleting)


def pod_list(
    backend: DeliveryBackend,
    *,
    namespace: str | None = None,
    node: str | None = None,
    include_deleting: bool = False,
) -> list[dict[str, Any]]:
    """The cluster's Pods (one namespace, or all), optionally only those bound to `node`."""
    pods = backend.list("v1", "Pod", namespace, include_deleting=include_deleting)
    return [p for p in pods if node is None or pod_node(p) == node]
