"""The simulated Karpenter's disruption: expiry, drift and consolidation, held back by freezes.

What to disrupt is `scheduler.disruption`'s (pure); this module reads the Nodes, the Pods
bound to them and the NodePools through the cluster interface, marks nodes empty
(`kiln.dev/empty-since`), reads Kiln's `karpenter.sh/do-not-disrupt` marks, and drains
what was chosen (`provisioner.node_drain`, audited `scheduler.node.drained`). An expired
node taken past its NodePool's terminationGracePeriod despite the mark is audited
`scheduler.node.freeze_overridden`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

import audit
from kiln.cluster import DeliveryBackend
from kiln.cluster.nodes import (
    A_EMPTY_SINCE,
    A_FROZEN_BY,
    L_NODEPOOL,
    annotations_of,
    is_daemon_pod,
    is_disrupting,
    is_frozen,
    labels_of,
    live_pod_node,
    name_of,
    node_list,
)
from kiln.identity.permissions import system_actor
from scheduler import disruption, karpenter
from scheduler.extender.protocol import ProtocolError, pod_request
from scheduler.simulation.pricing import allocatable
from scheduler.simulation.provisioner import ACTOR, node_drain, node_with, pools_list

__all__ = ["nodes_disrupt"]


def _age(node: dict, now: datetime) -> float:
    created = parse_datetime((node.get("metadata") or {}).get("creationTimestamp") or "")
    return (now - created).total_seconds() if created else 0.0


def nodes_disrupt(
    *, backend: DeliveryBackend, now: datetime | None = None
) -> list[tuple[str, str]]:
    """Mark empty nodes, then drain what `disruption.plan_disruptions` picks (expired, empty)."""
    now = now or timezone.now()
    nodes = node_list(backend)
    loads = _node_loads(backend.list("v1", "Pod", include_deleting=False))
    busy = {name for name, (_, pods) in loads.items() if pods}
    states: list[disruption.NodeState] = []
    marks: list[dict[str, Any]] = []
    pools = pools_list(backend=backend, nodes=nodes)
    by_pool = {p.name: p for p in pools}
    for node in nodes:
        since = annotations_of(node).get(A_EMPTY_SINCE)
        empty = name_of(node) not in busy
        if empty and since is None:
            marks.append(
                node_with(node, annotations={A_EMPTY_SINCE: now.strftime("%Y-%m-%dT%H:%M:%SZ")})
            )
        elif not empty and since is not None:
            marks.append(node_with(node, annotations={A_EMPTY_SINCE: None}))
        since_at = parse_datetime(since) if (empty and since) else None
        states.append(
            disruption.NodeState(
                name=name_of(node),
                pool=labels_of(node).get(L_NODEPOOL, ""),
                age=_age(node, now),
                empty_for=(now - since_at).total_seconds()
                if since_at
                else (0.0 if empty else None),
                disrupting=is_disrupting(node),
                frozen=is_frozen(node),
                labels=labels_of(node),
                free=_free(node, loads),
                pods=loads.get(name_of(node), ((0.0, 0.0, 0.0), ()))[1],
                drifted=(pool := by_pool.get(labels_of(node).get(L_NODEPOOL, ""))) is not None
                and disruption.has_drifted(pool, labels_of(node)),
            )
        )
    if marks:
        backend.apply(marks, field_manager="karpenter")
    chosen = disruption.plan_disruptions(pools, states)
    # A node whose NodePool is gone is drained at once, as Karpenter does when a pool is deleted
    # (an environment's teardown deletes its pool, then waits for these nodes to go).
    live = {p.name for p in pools}
    chosen += [
        (s.name, "NodePoolDeleted") for s in states if s.pool not in live and not s.disrupting
    ]
    by_name = {name_of(n): n for n in nodes}
    ages = {s.name: s.age for s in states}
    for name, reason in chosen:
        if reason == disruption.EXPIRED_PAST_GRACE:
            _freeze_overridden(by_name[name], by_pool[labels_of(by_name[name])[L_NODEPOOL]], ages)
        node_drain(backend=backend, node=by_name[name], reason=reason)
    return chosen


Load = tuple[tuple[float, float, float], tuple[tuple[float, float, float, dict], ...]]


def _node_loads(pods: list[dict]) -> dict[str, Load]:
    """Per node: what every live pod bound there requests, and its workload pods one by one."""
    totals: dict[str, list[float]] = {}
    workload: dict[str, list[tuple[float, float, float, dict]]] = {}
    for pod in pods:
        node = live_pod_node(pod)
        if not node:
            continue
        try:
            req = pod_request(pod)
        except ProtocolError:
            continue
        total = totals.setdefault(node, [0.0, 0.0, 0.0])
        total[0], total[1], total[2] = total[0] + req.cpu, total[1] + req.memory, total[2] + req.gpu
        if not is_daemon_pod(pod):
            workload.setdefault(node, []).append(
                (req.cpu, req.memory, req.gpu, pod.get("spec") or {})
            )
    return {node: ((t[0], t[1], t[2]), tuple(workload.get(node, ()))) for node, t in totals.items()}


def _free(node: dict, loads: dict[str, Load]) -> tuple[float, float, float]:
    """A node's allocatable less what its pods request."""
    cpu, memory, gpu = allocatable(node)
    used = loads.get(name_of(node), ((0.0, 0.0, 0.0), ()))[0]
    return (cpu - used[0], memory - used[1], gpu - used[2])


def _freeze_overridden(node: dict, pool: karpenter.Pool, ages: dict[str, float]) -> None:
    """Audit that expiry past the pool's hard bound takes a node marked do-not-disrupt anyway."""
    audit.record(
        system_actor(ACTOR),
        "scheduler.node.freeze_overridden",
        f"scheduler:node:{name_of(node)}",
        {
            "nodepool": pool.name,
            "reason": disruption.EXPIRED_PAST_GRACE,
            "frozen_by": annotations_of(node).get(A_FROZEN_BY, ""),
            "age_seconds": round(ages.get(name_of(node), 0.0), 1),
            "expire_after_seconds": pool.expire_after,
            "termination_grace_seconds": pool.termination_grace,
        },
    )
