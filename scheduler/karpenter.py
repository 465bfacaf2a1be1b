"""What a simulated Karpenter decides: which nodes to launch for pending pods, which to disrupt. No Django.

Launch (Karpenter's provisioner, simplified to what Kiln needs to be faithful to):

1. A pod is compatible with a NodePool when it tolerates the pool's taints and its
   nodeSelector / required node affinity hold for the labels a node of the pool
   would carry. Karpenter simulates only kube-scheduler's default filters, so
   Kiln adds the hard rules of its extender: a latency-sensitive (or
   unlabelled) pod needs an on-demand offering, as a deployment would add with
   a mutating webhook's node affinity; a pod of an environment with its own
   NodePool is compatible only with that pool, and no other pod with it
   (`pools`: own pools); a spot offering whose capacity pool already holds
   ceil(r / k) of the pod's workload's spot replicas, counting the nodes
   planned this round, is not one the pod can use, so Karpenter launches into
   another capacity pool the NodePool allows (`pools`: capacity pools).
2. Pods are packed first-fit-decreasing onto planned nodes of a pool; a planned
   node keeps every offering (instance type x zone x capacity type allowed by the
   pool's requirements) its pods still fit, so packing never narrows it to one
   type early.
3. Each planned node launches as the cheapest offering that fits its pods and
   the pool's DaemonSet overhead (what the DaemonSets that would run on it
   request, as Karpenter reserves it), spot where the pool allows it (spot is cheaper in every price book Kiln reads),
   provided the pool's `limits` (cpu, memory, GPUs over its nodes) still hold.

A pod that fits no offering of any compatible pool stays pending with a reason.

Disruption (expiry, drift, consolidation, and Kiln's do-not-disrupt freezes) is
`scheduler.disruption`'s, re-exported here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from scheduler import pools
from scheduler.kubefilters import matches_affinity, untolerated_taint

SPOT, ON_DEMAND = "spot", "on-demand"
L_TYPE = "node.kubernetes.io/instance-type"
L_ZONE = "topology.kubernetes.io/zone"
L_CAPACITY = "karpenter.sh/capacity-type"
L_POOL = "karpenter.sh/nodepool"
REASON_NO_POOL = "incompatible with every NodePool (taints, selector or affinity)"
REASON_NO_OFFERING = "no instance type of a compatible NodePool fits its requests"
REASON_LIMITS = "every compatible NodePool would exceed its limits"
REASON_SPREAD = (
    "every capacity pool its NodePools allow already holds its share of the workload's spot "
    "replicas"
)
_DURATION = re.compile(r"(\d+)(h|m|s)")


def parse_duration(text: str | None) -> float | None:
    """Seconds of a Go duration ("720h", "5m", "1h30m"); None for "Never", empty or unreadable."""
    if not text or text == "Never":
        return None
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return float(sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts))


@dataclass(frozen=True)
class Offering:
    """One way to launch a node: instance type, zone, capacity type, shape (cores, bytes, GPUs), $/h."""

    instance_type: str
    zone: str
    capacity_type: str
    cpu: float
    memory: float
    gpu: float
    price: float

    def holds(self, cpu: float, memory: float, gpu: float) -> bool:
        return cpu <= self.cpu + 1e-9 and memory <= self.memory and gpu <= self.gpu


@dataclass
class Pool:
    """A NodePool as the provisioner reads it: requirements, template, limits, disruption."""

    name: str
    environment: str
    labels: dict[str, str]
    taints: list[dict]
    offerings: list[Offering]
    limits: tuple[float, float, float]  # cores, bytes, GPUs (inf where not limited)
    used: tuple[float, float, float] = (0.0, 0.0, 0.0)  # capacity of its nodes now
    expire_after: float | None = None
    consolidate_after: float | None = None
    budget: str = "10%"
    # spec.template.spec.terminationGracePeriod (seconds): how long past expireAfter a
    # do-not-disrupt node is waited for; None waits as long as it is marked.
    termination_grace: float | None = None
    # Label key -> the values its `In` requirements allow (instance type, zone, capacity type):
    # a node of the pool whose label is outside them has drifted.
    allowed: dict[str, frozenset[str]] = field(default_factory=dict)
    consolidation_policy: str = "WhenEmpty"
    # What the DaemonSets that would run on a new node of the pool request (cores, bytes, GPUs).
    overhead: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass
class PendingPod:
    """A pod no node can take now: its key, requests (cores, bytes, GPUs), scheduling spec, class."""

    key: str
    cpu: float
    memory: float
    gpu: float
    spec: dict
    needs_on_demand: bool
    namespace: str = ""
    # The pod's workload and the most spot replicas of it one capacity pool may hold (0: not
    # spread), with the spot replicas each capacity pool holds now.
    workload: str = ""
    cap: int = 0
    held: dict[str, int] = field(default_factory=dict)


@dataclass
class PlannedNode:
    """A node to launch: its pool, the offering chosen and the pods it is for."""

    pool: str
    offering: Offering
    pods: list[str] = field(default_factory=list)


@dataclass
class Plan:
    """The launches of one provisioning round and why the other pods wait."""

    nodes: list[PlannedNode] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)


def _node_labels(pool: Pool, offering: Offering | None) -> dict[str, str]:
    labels = {**pool.labels, L_POOL: pool.name}
    if offering is not None:
        labels.update(
            {
                L_TYPE: offering.instance_type,
                L_ZONE: offering.zone,
                L_CAPACITY: offering.capacity_type,
            }
        )
    return labels


def _pool_of(o: Offering) -> str:
    return pools.capacity_pool(o.instance_type, o.zone, o.capacity_type)


def _candidates(pool: Pool, pod: PendingPod, own: frozenset[str] = frozenset()) -> list[Offering]:
    """The pool's offerings this pod could run on (class, selector and affinity over their
    labels, own pools: `own` are the environments whose own NodePool exists)."""
    if pod.namespace in own and pool.environment != pod.namespace:
        return []
    if pool.environment and pool.environment != pod.namespace:
        return []
    if untolerated_taint(pod.spec.get("tolerations") or [], pool.taints) is not None:
        return []
    return [
        o
        for o in pool.offerings
        if not (pod.needs_on_demand and o.capacity_type == SPOT)
        and matches_affinity(_node_labels(pool, o), pod.spec)
    ]


def _room(pod: PendingPod, o: Offering, planned: dict[tuple[str, str], int]) -> bool:
    """Whether the offering's capacity pool may take one more spot replica of the pod's workload."""
    if not pod.cap or o.capacity_type != SPOT:
        return True
    pool = _pool_of(o)
    return pod.held.get(pool, 0) + planned.get((pod.workload, pool), 0) < pod.cap


def _settle(node: _Open, pod: PendingPod, planned: dict[tuple[str, str], int]) -> Offering | None:
    """A spread pod fixes its node's offering now (the cheapest), so its capacity pool counts;
    -> the offering fixed (None for a pod that is not spread)."""
    if not pod.cap:
        return None
    choice = min(node.options, key=lambda o: (o.price, o.instance_type, o.zone))
    node.options = [choice]
    if choice.capacity_type == SPOT:
        key = (pod.workload, _pool_of(choice))
        planned[key] = planned.get(key, 0) + 1
    return choice


@dataclass
class _Open:
    pool: Pool
    options: list[Offering]
    cpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0
    pods: list[str] = field(default_factory=list)
    keys: frozenset = frozenset()


def plan_launches(node_pools: list[Pool], pending: list[PendingPod]) -> Plan:
    """Nodes to launch for `pending` (first-fit-decreasing, cheapest fitting offering, within limits)."""
    plan = Plan()
    opened: list[_Open] = []
    used = {p.name: list(p.used) for p in node_pools}
    own = frozenset(p.environment for p in node_pools if p.environment)
    planned: dict[tuple[str, str], int] = {}
    for pod in sorted(pending, key=lambda p: (-p.gpu, -p.cpu, -p.memory, p.key)):
        per_pool = [(pool, _candidates(pool, pod, own)) for pool in node_pools]
        per_pool = [(pool, c) for pool, c in per_pool if c]
        if not per_pool:
            plan.waiting[pod.key] = REASON_NO_POOL
            continue
        spread = [(pool, [o for o in c if _room(pod, o, planned)]) for pool, c in per_pool]
        spread = [(pool, c) for pool, c in spread if c]
        if not spread:
            plan.waiting[pod.key] = REASON_SPREAD
            continue
        per_pool = spread
        allowed = {(pool.name, o) for pool, c in per_pool for o in c}
        placed = False
        for node in opened:
            options = [
                o
                for o in node.options
                if (node.pool.name, o) in allowed
                and o.holds(node.cpu + pod.cpu, node.memory + pod.memory, node.gpu + pod.gpu)
            ]
            if options:
                node.options = options
                node.cpu, node.memory, node.gpu = (
                    node.cpu + pod.cpu,
                    node.memory + pod.memory,
                    node.gpu + pod.gpu,
                )
                node.pods.append(pod.key)
                _settle(node, pod, planned)
                placed = True
                break
        if placed:
            continue
        fitting = [
            (pool, [o for o in c if o.holds(*_with_overhead(pool, pod))]) for pool, c in per_pool
        ]
        fitting = [(pool, c) for pool, c in fitting if c]
        if not fitting:
            plan.waiting[pod.key] = REASON_NO_OFFERING
            continue
        within = [
            (pool, [o for o in c if _within_limits(pool, used[pool.name], o)])
            for pool, c in fitting
        ]
        within = [(pool, c) for pool, c in within if c]
        if not within:
            plan.waiting[pod.key] = REASON_LIMITS
            continue
        pool, options = min(within, key=lambda pc: min(o.price for o in pc[1]))
        node = _Open(pool, options, *_with_overhead(pool, pod), [pod.key])
        # Charge the pool for the largest option until the cheapest fitting one is chosen below.
        opened.append(node)
        biggest = max(options, key=lambda o: (o.cpu, o.memory))
        _charge(used[pool.name], biggest)
        fixed = _settle(node, pod, planned)
        if fixed is not None:  # charge the pool for the offering fixed, not the largest
            _charge(used[pool.name], biggest, sign=-1.0)
            _charge(used[pool.name], fixed)
    for node in opened:
        choice = min(node.options, key=lambda o: (o.price, o.instance_type, o.zone))
        plan.nodes.append(PlannedNode(node.pool.name, choice, list(node.pods)))
    return plan


def _with_overhead(pool: Pool, pod: PendingPod) -> tuple[float, float, float]:
    """A new node's requests with its first pod: the pool's DaemonSet overhead plus the pod."""
    return (pool.overhead[0] + pod.cpu, pool.overhead[1] + pod.memory, pool.overhead[2] + pod.gpu)


def _within_limits(pool: Pool, used: list[float], o: Offering) -> bool:
    return (
        used[0] + o.cpu <= pool.limits[0] + 1e-9
        and used[1] + o.memory <= pool.limits[1]
        and used[2] + o.gpu <= pool.limits[2]
    )


def _charge(used: list[float], o: Offering, sign: float = 1.0) -> None:
    used[0] += sign * o.cpu
    used[1] += sign * o.memory
    used[2] += sign * o.gpu


# Disruption lives in its own module; its names stay readable from here.
from scheduler.disruption import (  # noqa: E402 - after Pool, which it reads
    DRIFTED,
    EMPTY,
    EXPIRED,
    EXPIRED_PAST_GRACE,
    UNDERUTILIZED,
    WHEN_UNDERUTILIZED,
    NodeState,
    budget_allows,
    expiry_reason,
    has_drifted,
    plan_disruptions,
)

__all__ = [
    "DRIFTED",
    "EMPTY",
    "EXPIRED",
    "EXPIRED_PAST_GRACE",
    "UNDERUTILIZED",
    "WHEN_UNDERUTILIZED",
    "NodeState",
    "budget_allows",
    "expiry_reason",
    "has_drifted",
    "plan_disruptions",
]
