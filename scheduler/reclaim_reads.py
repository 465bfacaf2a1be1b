"""Spot reclaims as the scheduler page shows them: which nodes were reclaimed, when, which pods moved.

Read from the audit chain, where each reclaim is on record: the two-minute notice
(`scheduler.node.reclaim_noticed`: the node's pool, environment, type and zone, when
it goes, every pod evicted with its workload) and the node's removal
(`scheduler.node.reclaimed`). Where each moved pod's workload runs now comes from the
cluster's pods (the workload's pods bound to a node, through the cluster interface).
An event the writer has not chained yet shows once it is (the writer's lag).

What a viewer sees is filtered as the node list is: a reclaim by `can_view_node`,
each moved pod by `can_view_pod` (the others are counted, not named).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from audit.models import ChainEvent
from kiln.identity.permissions import Actor, can_view_node, can_view_pod

NOTICED = "scheduler.node.reclaim_noticed"
RECLAIMED = "scheduler.node.reclaimed"
LIMIT = 20


@dataclass(frozen=True)
class MovedPod:
    """A pod evicted by a reclaim's notice, its workload, and the nodes that workload runs on now."""

    pod: str
    owner: str  # "ReplicaSet/demo-web-5c9f", "" for a bare pod
    workload_class: str
    now_on: list[str]


@dataclass(frozen=True)
class MovedWorkload:
    """The pods of one workload a reclaim evicted, and the nodes the workload runs on now."""

    owner: str
    workload_class: str
    pods: list[str]
    now_on: list[str]


@dataclass(frozen=True)
class ReclaimView:
    """One spot reclaim: the node, its pool and environment, notice and removal, pods moved."""

    seq: int  # the notice's audit entry
    node: str
    nodepool: str
    environment: str
    instance_type: str
    zone: str
    noticed_at: datetime
    reclaim_at: datetime | None
    reclaimed_at: datetime | None
    moved: list[MovedPod] = field(default_factory=list)
    hidden_pods: int = 0  # moved pods the viewer may not see

    @property
    def workloads(self) -> list[MovedWorkload]:
        """The moved pods grouped by workload (a bare pod is its own), in the order evicted."""
        groups: dict[str, MovedWorkload] = {}
        for m in self.moved:
            key = m.owner or m.pod
            if key not in groups:
                groups[key] = MovedWorkload(m.owner, m.workload_class, [], m.now_on)
            groups[key].pods.append(m.pod)
        return list(groups.values())


def _data(event: ChainEvent) -> dict[str, Any]:
    try:
        value = json.loads(event.data)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _workload_nodes(pods: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[str]]:
    """(namespace, owner kind, owner name) to the nodes the owner's bound pods are on."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        for ref in metadata.get("ownerReferences") or []:
            if ref.get("controller"):
                key = (
                    str(metadata.get("namespace") or ""),
                    ref.get("kind", ""),
                    ref.get("name", ""),
                )
                out.setdefault(key, set()).add(str(node))
    return {key: sorted(nodes) for key, nodes in out.items()}


def reclaim_list(
    *, viewer: Actor, pods: list[dict[str, Any]], teams: dict[str, str], limit: int = LIMIT
) -> list[ReclaimView]:
    """The most recent spot reclaims the viewer may see, newest first.

    `pods` are the cluster's pods now and `teams` each namespace's team (as the node
    list reads them), so one read of the cluster serves the whole page.
    """
    notices = list(ChainEvent.objects.filter(action=NOTICED).order_by("-seq")[: limit * 2])
    targets = {n.target for n in notices}
    removed: dict[str, list[ChainEvent]] = {}
    for event in ChainEvent.objects.filter(action=RECLAIMED, target__in=targets).order_by("seq"):
        removed.setdefault(event.target, []).append(event)
    running = _workload_nodes(pods)
    out: list[ReclaimView] = []
    for notice in notices:
        data = _data(notice)
        environment = str(data.get("environment") or "")
        team = teams.get(environment) if environment else None
        if not can_view_node(viewer, environment=environment, team=team):
            continue
        gone = next((e for e in removed.get(notice.target, []) if e.seq > notice.seq), None)
        node = notice.target.removeprefix("scheduler:node:")
        moved, hidden = [], 0
        for entry in data.get("moved") or [{"pod": key} for key in data.get("evicted") or []]:
            key = str(entry.get("pod") or "")
            namespace = key.split("/", 1)[0]
            if not can_view_pod(viewer, team=teams.get(namespace)):
                hidden += 1
                continue
            kind, owner = str(entry.get("owner_kind") or ""), str(entry.get("owner") or "")
            moved.append(
                MovedPod(
                    pod=key,
                    owner=f"{kind}/{owner}" if kind else "",
                    workload_class=str(entry.get("workload_class") or ""),
                    now_on=[n for n in running.get((namespace, kind, owner), []) if n != node],
                )
            )
        reclaim_at = data.get("reclaim_at")
        out.append(
            ReclaimView(
                seq=notice.seq,
                node=node,
                nodepool=str(data.get("nodepool") or ""),
                environment=environment,
                instance_type=str(data.get("instance_type") or ""),
                zone=str(data.get("zone") or ""),
                noticed_at=notice.recorded_at,
                reclaim_at=parse_datetime(reclaim_at) if isinstance(reclaim_at, str) else None,
                reclaimed_at=gone.recorded_at if gone is not None else None,
                moved=moved,
                hidden_pods=hidden,
            )
        )
        if len(out) >= limit:
            break
    return out
