"""What a simulated Karpenter disrupts, and when Kiln's do-not-disrupt freeze holds it back. No Django.

Disruption (Karpenter v1): `expireAfter` is forceful (a node older than it goes,
budgets do not hold it back); a node empty of workload pods for
`consolidateAfter` is consolidated, and a drifted node (its instance type, zone or
capacity type no longer one the pool allows) replaced, at most the pool's
disruption budget at a time (`nodes: "20%"` of the pool's nodes rounded up, or a
count), counting nodes already being disrupted.

A node annotated `karpenter.sh/do-not-disrupt: "true"` (`frozen`) is left out of
consolidation and drift. Expiry waits for it too, but only until the pool's
`terminationGracePeriod` has passed on top of `expireAfter`: that hard bound wins
over the annotation, as Karpenter's does (`EXPIRED_PAST_GRACE`, which the caller audits).
A pool without a terminationGracePeriod keeps a frozen node for as long as it is frozen.

With `consolidationPolicy: WhenEmptyOrUnderutilized` (the pools Kiln composes) a node
older than `consolidateAfter` whose workload pods all fit, first-fit decreasing, on the
free capacity of the pool's other nodes of its capacity pool (instance type, zone and
capacity type alike, so no workload's spread over capacity pools changes; their
nodeSelector and required affinity holding there) is deleted and its pods go there
(`UNDERUTILIZED`), within the same budget. Not
simulated: replacing a node by a cheaper one, multi-node consolidation, and any budget
but the first one's `nodes` (budget `schedule`, `duration` and `reasons` are not read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler.kubefilters import matches_affinity

if TYPE_CHECKING:
    from scheduler.karpenter import Pool

# Why a node is disrupted (Karpenter's reasons; the last is expiry overriding do-not-disrupt).
EXPIRED, EMPTY, DRIFTED, UNDERUTILIZED = "Expired", "Empty", "Drifted", "Underutilized"
WHEN_UNDERUTILIZED = "WhenEmptyOrUnderutilized"
CAPACITY_POOL_LABELS = (
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "karpenter.sh/capacity-type",
)
EXPIRED_PAST_GRACE = "ExpiredPastTerminationGracePeriod"


@dataclass(frozen=True)
class NodeState:
    """What disruption reads of a node: pool, age, how long it has been empty, whether already going."""

    name: str
    pool: str
    age: float
    empty_for: float | None  # seconds without a workload pod; None while it holds one
    disrupting: bool
    frozen: bool = False  # carries karpenter.sh/do-not-disrupt: "true"
    drifted: bool = False  # its offering is no longer one its pool allows
    labels: dict[str, str] = field(default_factory=dict)
    free: tuple[float, float, float] = (0.0, 0.0, 0.0)  # allocatable less every request
    # Its workload pods: requests (cores, bytes, GPUs) and scheduling spec each.
    pods: tuple[tuple[float, float, float, dict], ...] = ()


def budget_allows(budget: str, pool_nodes: int) -> int:
    """How many of a pool's nodes may be disrupted at once: a count, or a percentage rounded up."""
    text = str(budget).strip()
    try:
        if text.endswith("%"):
            return math.ceil(pool_nodes * float(text[:-1]) / 100.0)
        return int(text)
    except ValueError:
        return 0  # an unreadable budget disrupts nothing voluntarily


def has_drifted(pool: Pool, labels: dict[str, str]) -> bool:
    """True when a node's instance type, zone or capacity type is no longer one the pool allows."""
    return any(labels.get(key) not in values for key, values in pool.allowed.items())


def expiry_reason(pool: Pool, node: NodeState) -> str | None:
    """EXPIRED once a node is older than `expireAfter`; a frozen node only past the hard bound
    `expireAfter + terminationGracePeriod` (EXPIRED_PAST_GRACE), never without a grace period."""
    if node.disrupting or pool.expire_after is None or node.age < pool.expire_after:
        return None
    if not node.frozen:
        return EXPIRED
    if pool.termination_grace is not None and node.age >= (
        pool.expire_after + pool.termination_grace
    ):
        return EXPIRED_PAST_GRACE
    return None


def plan_disruptions(pools: list[Pool], nodes: list[NodeState]) -> list[tuple[str, str]]:
    """(node, reason) to disrupt now: every expired node, then drifted and empty ones within
    the budget; a frozen node only when its expiry is past the hard bound."""
    by_pool = {p.name: p for p in pools}
    out: list[tuple[str, str]] = []
    for pool_name in sorted({n.pool for n in nodes}):
        pool = by_pool.get(pool_name)
        members = [n for n in nodes if n.pool == pool_name]
        if pool is None:
            continue
        going = sum(1 for n in members if n.disrupting)
        for n in members:
            reason = expiry_reason(pool, n)
            if reason is not None:
                out.append((n.name, reason))
                going += 1
        room = budget_allows(pool.budget, len(members)) - going
        chosen = {name for name, _ in out}
        voluntary = [n for n in members if n.name not in chosen and not n.disrupting]
        voluntary = [n for n in voluntary if not n.frozen]
        for n in sorted(voluntary, key=lambda n: n.name):
            if room <= 0:
                break
            if n.drifted:
                out.append((n.name, DRIFTED))
                chosen.add(n.name)
                room -= 1
        for n in sorted(voluntary, key=lambda n: -(n.empty_for or 0.0)):
            if room <= 0:
                break
            if (
                n.name not in chosen
                and pool.consolidate_after is not None
                and n.empty_for is not None
                and n.empty_for >= pool.consolidate_after
            ):
                out.append((n.name, EMPTY))
                chosen.add(n.name)
                room -= 1
        if room > 0 and pool.consolidation_policy == WHEN_UNDERUTILIZED:
            out += _underutilized(pool, members, chosen, room)
    return out


def _underutilized(
    pool: Pool, members: list[NodeState], chosen: set[str], room: int
) -> list[tuple[str, str]]:
    """Nodes whose pods all fit on the pool's other nodes, least loaded first, within `room`.

    Frozen nodes are never deleted, though they still take pods from the others.
    """
    if pool.consolidate_after is None:
        return []
    out: list[tuple[str, str]] = []
    receivers = {n.name: list(n.free) for n in members if n.name not in chosen and not n.disrupting}
    candidates = [
        n
        for n in members
        if n.pods and n.name in receivers and not n.frozen and n.age >= pool.consolidate_after
    ]
    by_name = {n.name: n for n in members}
    for n in sorted(candidates, key=lambda n: (sum(p[0] for p in n.pods), n.name)):
        if room <= 0:
            break
        # Only onto nodes of the same capacity pool: each workload then keeps the replicas it
        # has in every capacity pool, so the extender's spread filter never refuses the move.
        same = _capacity_pool(n.labels)
        others = {
            name: list(free)
            for name, free in receivers.items()
            if name != n.name and _capacity_pool(by_name[name].labels) == same
        }
        if _fits(n.pods, others, by_name):
            receivers.pop(n.name)
            receivers.update(others)
            out.append((n.name, UNDERUTILIZED))
            room -= 1
    return out


def _capacity_pool(labels: dict[str, str]) -> tuple[str | None, ...]:
    """Instance type, zone and capacity type: what one spot reclaim takes back at once."""
    return tuple(labels.get(key) for key in CAPACITY_POOL_LABELS)


def _fits(
    pods: tuple[tuple[float, float, float, dict], ...],
    free: dict[str, list[float]],
    nodes: dict[str, NodeState],
) -> bool:
    """Place `pods` first-fit decreasing on `free` (changed in place); False if one fits nowhere."""
    for cpu, memory, gpu, spec in sorted(pods, key=lambda p: (-p[2], -p[0], -p[1])):
        for name in sorted(free):
            left = free[name]
            if (
                cpu <= left[0] + 1e-9
                and memory <= left[1]
                and gpu <= left[2]
                and matches_affinity(nodes[name].labels, spec)
            ):
                left[0], left[1], left[2] = left[0] - cpu, left[1] - memory, left[2] - gpu
                break
        else:
            return False
    return True
