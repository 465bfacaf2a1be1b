"""Reads of the configured cluster: nodes with the pods bound to them, Workload Commitment now.

Everything is read through the cluster interface (`kiln/cluster`), one list per kind, and
filtered by what the viewer may see (`kiln.identity.permissions.can_view_node` and
`can_view_pod`): a node an environment's NodePool launched belongs to that environment's
team, found from its Namespace's `kiln.dev/team` label; so does a pod of that namespace, and a
tenant control plane's pod in the shared management namespace (`kiln.dev/tenant-control-plane`
names the namespace it serves). A pod the viewer may not see is counted on its node, never
named: a pod no team owns can carry another team's environment in its name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet

from kiln.cluster import DeliveryBackend, DeliveryError
from kiln.cluster.nodes import A_SCORE_EXPLANATION, L_TENANT_CONTROL_PLANE, annotations_of
from kiln.identity.permissions import Actor, can_view_node, can_view_pod
from scheduler import commitment, nodesync, scoring
from scheduler.models import (
    ENVIRONMENT_LABEL,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    ZONE_LABEL,
    CapacityType,
    CommitmentSample,
    Node,
)
from scheduler.placement_reads import WorkloadSpread, workload_spreads
from scheduler.reclaim_reads import ReclaimView, reclaim_list

TEAM_LABEL = "kiln.dev/team"
CAPACITY_TYPES = tuple(v for v in CapacityType.values if v != CapacityType.UNKNOWN)


@dataclass(frozen=True)
class NodeFilter:
    """Filters of the node list; empty strings match everything."""

    nodepool: str = ""
    environment: str = ""
    capacity_type: str = ""


@dataclass(frozen=True)
class PodView:
    """A pod bound to a node (or pending), as the page and the API show it."""

    namespace: str
    name: str
    workload_class: str
    labelled_class: str | None
    owner_kind: str
    phase: str
    cpu_millis: int
    memory_bytes: int
    gpus: int
    daemonset: bool
    explanation: Any  # the extender's JSON explanation, or None
    pending_reason: str

    @property
    def explanation_text(self) -> str:
        """The explanation as indented JSON for the page ("" when there is none)."""
        if self.explanation is None:
            return ""
        return json.dumps(self.explanation, indent=1, sort_keys=True)

    @property
    def explanation_words(self) -> list[str]:
        """The placement's explanation as sentences (empty when it has none Kiln knows)."""
        return explanation_words(self.explanation)


def _counts(rejected: Any) -> str:
    return ", ".join(f"{count} {why}" for why, count in sorted(rejected.items()))


def explanation_words(explanation: Any) -> list[str]:
    """`kiln.dev/score-explanation` in sentences: where the pod went and why, what was turned
    away and the best scores; [] when it is not an explanation of a placement."""
    if not isinstance(explanation, dict) or not explanation.get("node"):
        return []
    e = explanation
    placed = f"Placed on {e['node']} (score {e.get('score', '?')})"
    if e.get("workloadClass") and e.get("capacityType"):
        hourly = f", ${e['hourly']}/h" if e.get("hourly") is not None else ""
        placed += f": a {e['workloadClass']} pod on {e['capacityType']} capacity{hourly}"
    lines = [f"{placed}."]
    if "candidates" in e:
        lines.append(
            f"{e['candidates']} nodes considered: {e.get('feasibleNodes', '?')} fit it, "
            f"{e.get('passedExtender', '?')} passed Kiln's filter."
        )
    if isinstance(e.get("extenderRejected"), dict) and e["extenderRejected"]:
        lines.append(f"Kiln's filter turned away: {_counts(e['extenderRejected'])}.")
    if isinstance(e.get("defaultFilterRejected"), dict) and e["defaultFilterRejected"]:
        lines.append(
            f"kube-scheduler's filters turned away: {_counts(e['defaultFilterRejected'])}."
        )
    terms = e.get("terms")
    if isinstance(terms, dict) and terms:
        # The extender's terms, each in [0, 1]: cost, packing, risk (the score explainer's).
        lines.append("Terms: " + ", ".join(f"{k} {v}" for k, v in terms.items()) + ".")
    top = e.get("top") if isinstance(e.get("top"), list) else []  # an annotation anyone may set
    top = [t for t in top if isinstance(t, dict)][:3]
    if top:
        lines.append(
            "Best scores: " + ", ".join(f"{t.get('node')} {t.get('score')}" for t in top) + "."
        )
    return lines


@dataclass(frozen=True)
class NodeView:
    """A node of the cluster: labels, NodePool and environment, allocatable, requests and pods."""

    name: str
    labels: dict[str, str]
    nodepool: str
    environment: str
    team: str | None
    capacity_type: str
    instance_type: str
    zone: str
    allocatable: dict[str, int]
    requested: dict[str, int]
    committed: dict[str, int]
    pods: list[PodView] = field(default_factory=list)
    hidden_pods: int = 0  # pods on it the viewer may not see: counted, not named


def _explanation(pod: dict[str, Any]) -> Any:
    """The pod's score explanation, or its text marked unreadable (the page shows either)."""
    raw = annotations_of(pod).get(A_SCORE_EXPLANATION)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return {"unreadable": str(raw)[:500]}


def _pending_reason(pod: dict[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', '')}: {condition.get('message', '')}".strip(": ")
    return ""


def pod_view(pod: dict[str, Any]) -> PodView | None:
    """A v1 Pod as a PodView; None if its requests cannot be read."""
    demand = nodesync.pod_demand(pod)
    if demand is None:
        return None
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return PodView(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        workload_class=scoring.workload_class_of(labels),
        labelled_class=labels.get(scoring.WORKLOAD_CLASS_LABEL),
        owner_kind=nodesync.owner_kind(pod),
        phase=str((pod.get("status") or {}).get("phase") or ""),
        cpu_millis=int(demand.cpu),
        memory_bytes=int(demand.memory),
        gpus=int(demand.gpu),
        daemonset=demand.daemonset,
        explanation=_explanation(pod),
        pending_reason=_pending_reason(pod),
    )


def pod_team(pod: dict[str, Any], teams: dict[str, str]) -> str | None:
    """The team a pod belongs to: its namespace's, or for a tenant control plane's pod in the
    management namespace the team of the namespace it serves; None when no team owns it."""
    metadata = pod.get("metadata") or {}
    team = teams.get(str(metadata.get("namespace") or ""))
    if team is not None:
        return team
    served = str((metadata.get("labels") or {}).get(L_TENANT_CONTROL_PLANE) or "")
    namespace, dot, _ = served.partition(".")
    return teams.get(namespace) if dot else None


def namespace_teams(backend: DeliveryBackend) -> dict[str, str]:
    """Each namespace's team, from its `kiln.dev/team` label (namespaces no team owns left out)."""
    teams = {}
    for ns in backend.list("v1", "Namespace"):
        metadata = ns.get("metadata") or {}
        team = (metadata.get("labels") or {}).get(TEAM_LABEL)
        if team:
            teams[str(metadata.get("name"))] = str(team)
    return teams


# The label composition puts on an environment's Namespace naming the environment's id.
REQUEST_ID_LABEL = "kiln.dev/request-id"


def environment_namespace(
    *, viewer: Actor, backend: DeliveryBackend, environment_id: str
) -> str | None:
    """The namespace of the environment with this id (its Namespace's `kiln.dev/request-id`),
    or None when there is none or the viewer may not see it: the two answer alike."""
    for ns in backend.list("v1", "Namespace"):
        metadata = ns.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if labels.get(REQUEST_ID_LABEL) != environment_id:
            continue
        namespace, team = str(metadata.get("name") or ""), labels.get(TEAM_LABEL)
        if namespace and team and can_view_node(viewer, environment=namespace, team=str(team)):
            return namespace
        return None
    return None


@dataclass(frozen=True)
class ClusterState:
    """One read of the cluster: its nodes (filtered for the viewer), pending pods, commitment and
    the recent spot reclaims."""

    nodes: list[NodeView]
    pending: list[PodView]
    commitment: commitment.Commitment
    reclaims: list[ReclaimView] = field(default_factory=list)
    hidden_pending: int = 0  # pending pods the viewer may not see: counted, not named
    # Each workload's replicas over the capacity pools, counting the pods the viewer may see.
    workloads: list[WorkloadSpread] = field(default_factory=list)


def cluster_state(
    *, viewer: Actor, backend: DeliveryBackend, filters: NodeFilter | None = None
) -> ClusterState:
    """Nodes the viewer may see (filtered), each with its pods the viewer may see; pending pods
    the viewer may see; and Workload Commitment of the whole cluster (aggregates name no pod)."""
    filters = filters or NodeFilter()
    raw_nodes = backend.list("v1", "Node", include_deleting=False)
    raw_pods = backend.list("v1", "Pod")
    teams = namespace_teams(backend)
    figures = nodesync.commitment_of(raw_nodes, raw_pods)
    by_node = {n.name: n for n in figures.nodes}
    requested = nodesync.requested_by_node(raw_pods)
    pods_on: dict[str, list[PodView]] = {}
    hidden_on: dict[str, int] = {}
    pending: list[PodView] = []
    hidden_pending = 0
    for pod in raw_pods:
        view = pod_view(pod)
        if view is None or view.phase in commitment.TERMINAL_PHASES:
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        if not can_view_pod(viewer, team=pod_team(pod, teams)):
            if node:
                hidden_on[node] = hidden_on.get(node, 0) + 1
            else:
                hidden_pending += 1
            continue
        if node:
            pods_on.setdefault(node, []).append(view)
        else:
            pending.append(view)
    nodes = []
    for raw in raw_nodes:
        observed = nodesync.observed_from_node(raw, requested)
        labels = observed.labels
        environment = labels.get(ENVIRONMENT_LABEL, "")
        team = teams.get(environment) if environment else None
        if not can_view_node(viewer, environment=environment, team=team):
            continue
        view = NodeView(
            name=observed.name,
            labels=labels,
            nodepool=labels.get(NODEPOOL_LABEL, ""),
            environment=environment,
            team=team,
            capacity_type=observed.fields()["capacity_type"],
            instance_type=labels.get(INSTANCE_TYPE_LABEL, ""),
            zone=labels.get(ZONE_LABEL, ""),
            allocatable={
                "cpu_millis": observed.allocatable_cpu_millis,
                "memory_bytes": observed.allocatable_memory_bytes,
                "gpus": observed.allocatable_gpus,
            },
            requested={
                "cpu_millis": observed.requested_cpu_millis,
                "memory_bytes": observed.requested_memory_bytes,
                "gpus": observed.requested_gpus,
            },
            committed=dict(
                zip(
                    ("cpu_millis", "memory_bytes", "gpus"),
                    map(int, by_node[observed.name].committed),
                    strict=True,
                )
            ),
            pods=sorted(pods_on.get(observed.name, []), key=lambda p: (p.namespace, p.name)),
            hidden_pods=hidden_on.get(observed.name, 0),
        )
        if _matches(view, filters):
            nodes.append(view)
    reclaims = reclaim_list(viewer=viewer, pods=raw_pods, teams=teams)
    workloads = workload_spreads(
        raw_nodes, raw_pods, visible=lambda pod: can_view_pod(viewer, team=pod_team(pod, teams))
    )
    return ClusterState(nodes, pending, figures, reclaims, hidden_pending, workloads)


def visible_node_names(*, viewer: Actor, backend: DeliveryBackend) -> set[str]:
    """The stored inventory's nodes the viewer may see, by the node list's rule (the score
    explainer lists no other: an environment's node is named after its NodePool)."""
    try:
        teams = namespace_teams(backend)
    except DeliveryError:  # owners unknown: environments' nodes only for who sees every team
        teams = {}
    visible = set()
    for name, labels in Node.objects.values_list("name", "labels"):
        environment = str((labels or {}).get(ENVIRONMENT_LABEL) or "")
        team = teams.get(environment) if environment else None
        if can_view_node(viewer, environment=environment, team=team):
            visible.add(name)
    return visible


def _matches(node: NodeView, filters: NodeFilter) -> bool:
    return (
        (not filters.nodepool or node.nodepool == filters.nodepool)
        and (not filters.environment or node.environment == filters.environment)
        and (not filters.capacity_type or node.capacity_type == filters.capacity_type)
    )


def commitment_samples(limit: int = 500) -> QuerySet[CommitmentSample]:
    """The most recent stored Workload Commitment samples, newest first."""
    return CommitmentSample.objects.order_by("-taken_at")[:limit]


def commitment_series(limit: int = 500) -> dict[str, list]:
    """The stored samples as chart columns, oldest first: epoch seconds and, per resource, the
    ratio and the pending ratio (None where undefined)."""
    samples = list(reversed(commitment_samples(limit)))
    series: dict[str, list] = {"t": [s.taken_at.timestamp() for s in samples]}
    for resource in commitment.RESOURCES:
        figures = [s.figures.get("resources", {}).get(resource, {}) for s in samples]
        series[resource] = [f.get("ratio") for f in figures]
        series[f"{resource}_pending"] = [f.get("pending_ratio") for f in figures]
    return series


def commitment_rows(series: dict[str, list]) -> list[dict[str, Any]]:
    """`commitment_series` as the rows of its chart's data table, oldest first: the sample's
    time and, per resource in `commitment.RESOURCES` order, the committed and the pending
    ratio in percent (None where undefined: no capacity)."""
    rows = []
    for i, t in enumerate(series["t"]):
        cells = []
        for resource in commitment.RESOURCES:
            for key in (resource, f"{resource}_pending"):
                ratio = series[key][i]
                cells.append(None if ratio is None else ratio * 100)
        rows.append({"at": datetime.fromtimestamp(t, UTC), "cells": cells})
    return rows
