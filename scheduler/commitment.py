"""Workload Commitment: scheduled pod requests over provisioned node capacity, per resource. No Django.

The definition is the autoscaling-metrics one (the Kubernetes autoscaling SIG's
"committed capacity"), per resource r in (cpu, memory, gpu):

    committed(r)        = Σ over nodes of committed requests(r) / Σ over nodes of allocatable(r)
    node committed(r)   = committed requests(r) on the node / allocatable(r) of the node

where a pod's requests count when it is bound to a node of the set (`spec.nodeName`) and
not terminal (phase Succeeded or Failed); DaemonSet pods are left out of the numerator
(they come with every node, so they are overhead of capacity, not work placed on it).
Pending demand is the requests of non-terminal, non-DaemonSet pods bound to no node; it
is reported beside the ratio (`pending`, `pending_ratio` = pending / capacity) and never
added to it. Requests of a resource on a node that offers none of it (impossible after
kube-scheduler's fit check, possible in inconsistent data) count nowhere, so the cluster
ratio is always the capacity-weighted mean of the node ratios. A ratio with zero capacity is `None` (undefined), never a division by zero.
Commitment may exceed 1 when requests overcommit a node; free capacity is clipped at 0.

The cluster figure comes with its spread over nodes (min, p50, p90, max of the node
ratios, nodes with capacity of that resource only) and with **stranded** capacity: the
free amount of r on nodes where another resource is committed at least `STRANDED_AT`,
capacity nothing more can use because the node is full on another axis.

Units are the caller's (millicores, bytes, GPUs in the live cluster; trace units in the
replay): every figure is a sum or a ratio of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RESOURCES = ("cpu", "memory", "gpu")
STRANDED_AT = 0.9  # a node committed at least this much on one resource strands the others
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class PodDemand:
    """One pod as commitment sees it: where it is bound, its requests and whether it counts."""

    node: str | None
    cpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0
    daemonset: bool = False
    terminal: bool = False


@dataclass(frozen=True)
class Spread:
    """Distribution of node ratios for one resource (None when no node has that resource)."""

    min: float | None
    p50: float | None
    p90: float | None
    max: float | None


@dataclass(frozen=True)
class ResourceCommitment:
    """The cluster figure for one resource, with pending demand beside it and its per-node spread."""

    resource: str
    committed: float
    capacity: float
    ratio: float | None
    pending: float
    pending_ratio: float | None
    stranded: float
    spread: Spread


@dataclass(frozen=True)
class NodeCommitment:
    """One node's committed requests, capacity and ratio per resource (None: no capacity)."""

    name: str
    committed: tuple[float, float, float]
    capacity: tuple[float, float, float]
    ratios: tuple[float | None, float | None, float | None]


@dataclass(frozen=True)
class Commitment:
    """The whole figure: per resource for the cluster, and per node."""

    resources: tuple[ResourceCommitment, ...]
    nodes: tuple[NodeCommitment, ...]
    pending_pods: int
    daemonset_pods: int

    def resource(self, name: str) -> ResourceCommitment:
        """The cluster figure of one resource by name (`cpu`, `memory`, `gpu`)."""
        return self.resources[RESOURCES.index(name)]

    def as_dict(self, *, per_node: bool = True) -> dict[str, Any]:
        """JSON-ready form: ratios rounded to 6 places; per-node rows unless asked not to."""
        out: dict[str, Any] = {
            "resources": {
                r.resource: {
                    "committed": r.committed,
                    "capacity": r.capacity,
                    "ratio": _round(r.ratio),
                    "pending": r.pending,
                    "pending_ratio": _round(r.pending_ratio),
                    "stranded": r.stranded,
                    "spread": {k: _round(v) for k, v in vars(r.spread).items()},
                }
                for r in self.resources
            },
            "pending_pods": self.pending_pods,
            "daemonset_pods": self.daemonset_pods,
        }
        if per_node:
            out["nodes"] = [
                {
                    "name": n.name,
                    **{
                        res: {
                            "committed": n.committed[i],
                            "capacity": n.capacity[i],
                            "ratio": _round(n.ratios[i]),
                        }
                        for i, res in enumerate(RESOURCES)
                    },
                }
                for n in self.nodes
            ]
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def _ratio(numerator: float, denominator: float) -> float | None:
    return float(numerator) / float(denominator) if denominator > 0 else None


def demand_by_node(
    names: Sequence[str], pods: Iterable[PodDemand]
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(committed (N, 3) in `names` order, pending (3,), pending pods, DaemonSet pods).

    Pods bound to a node outside `names` count nowhere: their capacity is not in the set.
    """
    index = {name: i for i, name in enumerate(names)}
    committed = np.zeros((len(names), len(RESOURCES)))
    pending = np.zeros(len(RESOURCES))
    pending_pods = daemonset_pods = 0
    for pod in pods:
        if pod.terminal:
            continue
        if pod.daemonset:
            daemonset_pods += 1
            continue
        row = (pod.cpu, pod.memory, pod.gpu)
        if pod.node is None:
            pending += row
            pending_pods += 1
        elif pod.node in index:
            committed[index[pod.node]] += row
    return committed, pending, pending_pods, daemonset_pods


def _quantile(values: np.ndarray, q: float) -> float | None:
    # "higher" picks an observed node ratio at or above the quantile, so p90 names a node that
    # exists and never understates how full the fuller nodes are.
    return float(np.quantile(values, q, method="higher")) if values.size else None


def _node_ratios(capacity: np.ndarray, committed: np.ndarray) -> tuple[np.ndarray, ...]:
    has = capacity > 0
    committed = np.where(has, committed, 0.0)
    node_ratio = np.divide(committed, capacity, out=np.zeros_like(committed), where=has)
    return has, committed, node_ratio


def cluster_figures(
    capacity: np.ndarray, committed: np.ndarray, pending: np.ndarray | None = None
) -> tuple[ResourceCommitment, ...]:
    """The cluster figure per resource from capacity and committed requests, both (N, 3)."""
    capacity = np.asarray(capacity, dtype=np.float64).reshape(-1, len(RESOURCES))
    committed = np.asarray(committed, dtype=np.float64).reshape(-1, len(RESOURCES))
    pending = np.zeros(len(RESOURCES)) if pending is None else np.asarray(pending, np.float64)
    has, committed, node_ratio = _node_ratios(capacity, committed)
    free = np.clip(capacity - committed, 0.0, None)
    full = np.where(has, node_ratio, 0.0) >= STRANDED_AT
    resources = []
    for r, name in enumerate(RESOURCES):
        others_full = np.delete(full, r, axis=1).any(axis=1)
        ratios = node_ratio[has[:, r], r]
        total_cap = float(capacity[:, r].sum())
        resources.append(
            ResourceCommitment(
                resource=name,
                committed=float(committed[:, r].sum()),
                capacity=total_cap,
                ratio=_ratio(committed[:, r].sum(), total_cap),
                pending=float(pending[r]),
                pending_ratio=_ratio(pending[r], total_cap),
                stranded=float(free[others_full & has[:, r], r].sum()),
                spread=Spread(
                    min=float(ratios.min()) if ratios.size else None,
                    p50=_quantile(ratios, 0.5),
                    p90=_quantile(ratios, 0.9),
                    max=float(ratios.max()) if ratios.size else None,
                ),
            )
        )
    return tuple(resources)


def compute(
    names: Sequence[str],
    capacity: np.ndarray,
    committed: np.ndarray,
    pending: np.ndarray | None = None,
    *,
    pending_pods: int = 0,
    daemonset_pods: int = 0,
) -> Commitment:
    """Workload Commitment of N nodes from capacity and committed requests, both (N, 3)."""
    capacity = np.asarray(capacity, dtype=np.float64).reshape(len(names), len(RESOURCES))
    committed = np.asarray(committed, dtype=np.float64).reshape(len(names), len(RESOURCES))
    resources = cluster_figures(capacity, committed, pending)
    has, committed, node_ratio = _node_ratios(capacity, committed)
    nodes = tuple(
        NodeCommitment(
            name=name,
            committed=tuple(float(v) for v in committed[i]),
            capacity=tuple(float(v) for v in capacity[i]),
            ratios=tuple(float(node_ratio[i, r]) if has[i, r] else None for r in range(3)),
        )
        for i, name in enumerate(names)
    )
    return Commitment(resources, nodes, pending_pods, daemonset_pods)


def from_pods(
    nodes: Sequence[tuple[str, tuple[float, float, float]]], pods: Iterable[PodDemand]
) -> Commitment:
    """Workload Commitment of (name, capacity) nodes and the pods of the cluster."""
    names = [name for name, _ in nodes]
    capacity = np.array([cap for _, cap in nodes], dtype=np.float64).reshape(len(names), 3)
    committed, pending, pending_pods, ds_pods = demand_by_node(names, pods)
    return compute(
        names, capacity, committed, pending, pending_pods=pending_pods, daemonset_pods=ds_pods
    )
