"""Where workloads run, for the pages: spread over capacity pools, frozen nodes, an environment's nodes.

- `workload_spreads`: each workload's replicas per capacity pool (instance type x zone x
  capacity type, `scheduler.pools`), with `k` for its class (`KILN_SCHEDULER_SPREAD_K`,
  2 where unset) and the pools holding more than ceil(r / k) of its spot replicas flagged:
  what one spot reclaim would take at once. Built from the lists the scheduler page read
  already, counting only the pods the viewer may see.
- `frozen_nodes`: the open disruption freezes (scheduler.freezes) the viewer may see, with
  what holds each (the rollout or experiment, linked) and its bounds.
- `environment_nodes`: the nodes an environment's own NodePool launched, with their
  offering, pods and freeze.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import NoReverseMatch, reverse

from kiln.cluster import DeliveryBackend
from kiln.cluster.nodes import (
    A_FROZEN_BY,
    L_CAPACITY_TYPE,
    L_INSTANCE_TYPE,
    L_NODEPOOL,
    L_ZONE,
    annotations_of,
    is_daemon_pod,
    is_frozen,
    labels_of,
    live_pod_node,
    name_of,
    node_list,
)
from kiln.identity import visibility
from kiln.identity.permissions import Actor
from scheduler import pools, scoring
from scheduler.models import DisruptionFreeze, FreezeHolder

HOLDER_VISIBILITY = {
    FreezeHolder.ROLLOUT: visibility.ROLLOUTS,
    FreezeHolder.EXPERIMENT: visibility.EXPERIMENTS,
}
HOLDER_URLS = {
    FreezeHolder.ROLLOUT: ("canary:rollout-detail", "rollout_id"),
    FreezeHolder.EXPERIMENT: ("chaos:experiment-detail", "experiment_id"),
}


@dataclass(frozen=True)
class PoolShare:
    """One capacity pool's share of a workload: its replicas there, spot or not, and whether
    it holds more spot replicas than ceil(r / k)."""

    pool: str
    instance_type: str
    zone: str
    capacity_type: str
    replicas: int
    over: bool


@dataclass(frozen=True)
class WorkloadSpread:
    """A workload (namespace and controller, or spread group) over the capacity pools it runs in."""

    key: str
    namespace: str
    name: str
    workload_class: str
    replicas: int
    spot_replicas: int
    k: int
    cap: int | None  # ceil(r / k) for r >= 2 (None: not spread)
    pools: list[PoolShare] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        """A capacity pool holds more of its spot replicas than ceil(r / k)."""
        return any(p.over for p in self.pools)


def spread_k() -> dict[str, int]:
    """k per workload class from the spread filter's setting (2 for each class where unset)."""
    try:
        return pools.parse_spread_k(getattr(settings, "KILN_SCHEDULER_SPREAD_K", None))
    except pools.SpreadConfigError:
        return pools.parse_spread_k(None)


def workload_spreads(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], *, visible: Callable[[dict], bool]
) -> list[WorkloadSpread]:
    """Each workload's bound replicas per capacity pool, flagged first, then by name.

    `visible(pod)` says whether the viewer may see a pod; a workload is shown by its visible
    replicas only (a team sees its own workloads, never another's count).
    """
    pool_of = {
        name_of(n): (
            labels_of(n).get(L_INSTANCE_TYPE, ""),
            labels_of(n).get(L_ZONE, ""),
            labels_of(n).get(L_CAPACITY_TYPE, pools.ON_DEMAND),
        )
        for n in nodes
    }
    members: dict[str, list[tuple[str, str]]] = defaultdict(list)  # key -> (node, class)
    names: dict[str, tuple[str, str]] = {}
    for pod in pods:
        node = live_pod_node(pod)
        if not node or node not in pool_of:
            continue
        if is_daemon_pod(pod) or not visible(pod):
            continue
        placement = pools.pod_placement(pod)
        if not placement.workload:
            continue
        members[placement.workload].append((node, scoring.workload_class_of(labels_of(pod))))
        names[placement.workload] = (
            placement.namespace,
            placement.workload.split("/", 1)[1] if "/" in placement.workload else "",
        )
    ks = spread_k()
    out = []
    for key, placed in members.items():
        replicas = len(placed)
        cls = Counter(c for _, c in placed).most_common(1)[0][0]
        k = ks.get(cls, pools.DEFAULT_K)
        cap = pools.max_per_pool(replicas, k) if replicas >= 2 else None
        counts = Counter(pool_of[node] for node, _ in placed)
        shares = [
            PoolShare(
                pool=pools.capacity_pool(*offering),
                instance_type=offering[0],
                zone=offering[1],
                capacity_type=offering[2],
                replicas=count,
                over=cap is not None and offering[2] == pools.SPOT and count > cap,
            )
            for offering, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        out.append(
            WorkloadSpread(
                key=key,
                namespace=names[key][0],
                name=names[key][1],
                workload_class=cls,
                replicas=replicas,
                spot_replicas=sum(s.replicas for s in shares if s.capacity_type == pools.SPOT),
                k=k,
                cap=cap,
                pools=shares,
            )
        )
    return sorted(out, key=lambda w: (not w.flagged, w.namespace, w.name))


@dataclass(frozen=True)
class FrozenNode:
    """An open disruption freeze: the node, what holds it (and where to see that), its times."""

    node: str
    holder_kind: str
    holder_id: str
    holder_label: str
    team: str
    url: str
    since: datetime
    bound_at: datetime
    renewed_at: datetime
    applied: bool


def holder_url(kind: str, holder_id: str) -> str:
    """The page of the rollout or experiment holding a freeze ("" if it has none)."""
    name, arg = HOLDER_URLS.get(kind, ("", ""))
    try:
        return reverse(name, kwargs={arg: holder_id}) if name else ""
    except NoReverseMatch:
        return ""


def frozen_nodes(*, viewer: Actor) -> list[FrozenNode]:
    """The open freezes whose holder the viewer may see, by node."""
    rows = DisruptionFreeze.objects.filter(released_at__isnull=True).order_by(
        "node", "holder_kind", "since"
    )
    out = []
    for row in rows:
        if not visibility.sees(viewer, HOLDER_VISIBILITY[row.holder_kind], row.team or None):
            continue
        out.append(
            FrozenNode(
                node=row.node,
                holder_kind=row.holder_kind,
                holder_id=row.holder_id,
                holder_label=row.holder_label,
                team=row.team,
                url=holder_url(row.holder_kind, row.holder_id),
                since=row.since,
                bound_at=row.bound_at,
                renewed_at=row.renewed_at,
                applied=row.applied_at is not None,
            )
        )
    return out


@dataclass(frozen=True)
class EnvironmentNode:
    """A node of an environment's own NodePool, as its page shows it."""

    name: str
    nodepool: str
    instance_type: str
    zone: str
    capacity_type: str
    pods: list[str]
    frozen: bool
    frozen_by: str


def environment_nodes(*, namespace: str, backend: DeliveryBackend) -> list[EnvironmentNode]:
    """The nodes labelled with the environment (its own NodePool's), with the pods on each.

    The caller has checked the viewer may see the environment: its nodes and pods are its team's.
    """
    nodes = node_list(backend, environment=namespace)
    if not nodes:
        return []
    on: dict[str, list[str]] = defaultdict(list)
    for pod in backend.list("v1", "Pod", include_deleting=False):
        node = live_pod_node(pod)
        if node:
            on[node].append(f"{(pod.get('metadata') or {}).get('namespace', '')}/{name_of(pod)}")
    return [
        EnvironmentNode(
            name=name_of(n),
            nodepool=labels_of(n).get(L_NODEPOOL, ""),
            instance_type=labels_of(n).get(L_INSTANCE_TYPE, ""),
            zone=labels_of(n).get(L_ZONE, ""),
            capacity_type=labels_of(n).get(L_CAPACITY_TYPE, ""),
            pods=sorted(on.get(name_of(n), [])),
            frozen=is_frozen(n),
            frozen_by=annotations_of(n).get(A_FROZEN_BY, ""),
        )
        for n in nodes
    ]
