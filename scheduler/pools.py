"""Node pools as the extender's placement rules: environments' own pools, capacity pools as failure domains. No Django.

Two filters run after the spot guarantee and the resource fit (`scoring.filter_nodes`),
on the candidates that still fit, vectorised over them (`apply`):

**Own pools.** A node labelled `kiln.dev/environment: E` was launched by environment E's
own NodePool. A pod of namespace E, when E's own pool exists, is unschedulable on every
other node (`REASON_NOT_OWN_POOL`); a pod of any other namespace is unschedulable on E's
nodes (`REASON_OTHER_TENANT_POOL`). DaemonSet pods are exempt (node agents run on every
node). So a pod whose namespace lost its node selector still cannot land on a shared node,
nor another tenant's pod on E's. Both reasons are unresolvable: preemption cannot change
which pool a node belongs to.

**Capacity pools.** A capacity pool is instance type x zone x capacity type
(`capacity_pool`): what one spot reclaim takes back at once. A workload is the pods of one
namespace sharing a `kiln.dev/spread-group` label, else a controller owner reference
(`workload_key`). For a workload of r >= 2 replicas, a spot node is unschedulable for its
pod when the node's capacity pool already holds

    cap = ceil(r / k)                                              (`max_per_pool`)

of the workload's spot replicas (`REASON_SPREAD`, also unresolvable: preempting other
pods cannot lower the count). `k` is per workload class (default 2); a latency-sensitive
pod never reaches spot (the spot guarantee), so its `k` is never read. On-demand replicas
are not counted: on-demand capacity is not reclaimed. r is the workload's replicas as the
scheduler knows them (its pods bound or pending, not finished), never fewer than the
replicas counted in pools plus the pod being placed. A group of one (a spread-group label
on one pod only) is not spread. A filter, not a score: a score can be outscored.

After any sequence of placements through `apply` (and removals), no capacity pool holds
more than ceil(r / k) spot replicas of a workload whose r did not shrink
(`tests/scheduler/test_pools_property.py`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

L_ENVIRONMENT = "kiln.dev/environment"
L_SPREAD_GROUP = "kiln.dev/spread-group"
L_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
L_ZONE = "topology.kubernetes.io/zone"
L_CAPACITY_TYPE = "karpenter.sh/capacity-type"
SPOT, ON_DEMAND = "spot", "on-demand"
DEFAULT_K = 2
SPREAD_CLASSES = ("latency-sensitive", "standard", "batch")

# Filter reasons numbered on after scoring's (0 fit .. 5): int8 codes, unresolvable all.
REASON_NOT_OWN_POOL, REASON_OTHER_TENANT_POOL, REASON_SPREAD = range(6, 9)
REASON_MESSAGES: dict[int, str] = {
    REASON_NOT_OWN_POOL: "node is not in the node pool of the pod's environment",
    REASON_OTHER_TENANT_POOL: "node is in another environment's own node pool",
    REASON_SPREAD: "capacity pool already holds its share of the workload's spot replicas",
}
UNRESOLVABLE_REASONS = frozenset(REASON_MESSAGES)


class SpreadConfigError(ValueError):
    """A spread setting Kiln cannot use (a k below 1, an unknown class, unreadable text)."""


def capacity_pool(instance_type: str, zone: str, capacity_type: str) -> str:
    """The capacity pool's name: `<instance type>/<zone>/<capacity type>` ("?" for a missing part)."""
    return f"{instance_type or '?'}/{zone or '?'}/{capacity_type or ON_DEMAND}"


def max_per_pool(replicas: int, k: int) -> int:
    """ceil(replicas / k): the most spot replicas of one workload a capacity pool may hold."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise SpreadConfigError(f"k must be a whole number >= 1, not {k!r}")
    return max(1, math.ceil(replicas / k))


def parse_spread_k(text: str | Mapping[str, int] | None) -> dict[str, int]:
    """k per workload class from `"standard=2,batch=3"` (or a mapping); missing classes take 2.

    Refuses a k below 1, a class Kiln does not know and text it cannot read, naming which."""
    out = dict.fromkeys(SPREAD_CLASSES, DEFAULT_K)
    if not text:
        return out
    items: Iterable[tuple[str, Any]]
    if isinstance(text, Mapping):
        items = text.items()
    else:
        items = []
        for part in str(text).split(","):
            if not part.strip():
                continue
            name, sep, value = part.partition("=")
            if not sep:
                raise SpreadConfigError(f"{part.strip()!r} is not <class>=<k>")
            items.append((name.strip(), value.strip()))
    for name, value in items:
        if name not in out:
            raise SpreadConfigError(
                f"unknown workload class {name!r} (one of {', '.join(SPREAD_CLASSES)})"
            )
        try:
            k = int(value)
        except (TypeError, ValueError):
            raise SpreadConfigError(f"k for {name} must be a whole number, not {value!r}") from None
        if k < 1:
            raise SpreadConfigError(f"k for {name} must be >= 1, not {k}")
        out[name] = k
    return out


@dataclass(frozen=True)
class PodPlacement:
    """Who a pod is for the pool rules: its namespace, workload (or ""), whether a DaemonSet's."""

    namespace: str = ""
    workload: str = ""
    daemon: bool = False


def workload_key(namespace: str, labels: Mapping[str, Any], owner: tuple[str, str]) -> str:
    """`<ns>/spread-group/<g>` for a spread-group label, else `<ns>/<Kind>/<name>` of the controller."""
    group = labels.get(L_SPREAD_GROUP)
    if isinstance(group, str) and group:
        return f"{namespace}/spread-group/{group}"
    kind, name = owner
    if kind and name:
        return f"{namespace}/{kind}/{name}"
    return ""


def _controller(metadata: Mapping[str, Any]) -> tuple[str, str]:
    refs = metadata.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller"):
            kind, name = ref.get("kind"), ref.get("name")
            if isinstance(kind, str) and isinstance(name, str):
                return kind, name
    return "", ""


def pod_placement(pod: Any) -> PodPlacement:
    """A v1.Pod's namespace, workload and DaemonSet flag (anything malformed reads as absent)."""
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(metadata, dict):
        return PodPlacement()
    namespace = metadata.get("namespace")
    namespace = namespace if isinstance(namespace, str) else ""
    labels = metadata.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    owner = _controller(metadata)
    return PodPlacement(namespace, workload_key(namespace, labels, owner), owner[0] == "DaemonSet")


@dataclass
class PoolLayout:
    """Per node: its capacity pool (an index into `pools`) and own-pool environment (-1: shared)."""

    pools: list[str]
    pool_of: np.ndarray  # int32 (N,)
    env_of: np.ndarray  # int32 (N,), index into `environments`, -1 for a shared node
    environments: dict[str, int] = field(default_factory=dict)
    pool_index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls, nodes: Iterable[tuple[str, str, str, str]], own_pools: Iterable[str] = ()
    ) -> PoolLayout:
        """From (instance type, zone, capacity type, environment label) per node, in node order,
        and the environments whose own NodePool exists (with or without nodes yet)."""
        pool_index: dict[str, int] = {}
        environments: dict[str, int] = {}
        for env in own_pools:
            if env:
                environments.setdefault(env, len(environments))
        pool_of, env_of = [], []
        for instance_type, zone, capacity_type, env in nodes:
            pool = capacity_pool(instance_type, zone, capacity_type)
            pool_of.append(pool_index.setdefault(pool, len(pool_index)))
            if env:
                env_of.append(environments.setdefault(env, len(environments)))
            else:
                env_of.append(-1)
        return cls(
            pools=list(pool_index),
            pool_of=np.array(pool_of, dtype=np.int32),
            env_of=np.array(env_of, dtype=np.int32),
            environments=environments,
            pool_index=pool_index,
        )

    @classmethod
    def from_labels(
        cls, labels: Iterable[Mapping[str, str]], own_pools: Iterable[str] = ()
    ) -> PoolLayout:
        """From each node's labels (`node.kubernetes.io/instance-type`, zone, capacity type, env)."""
        return cls.build(
            (
                (
                    str(lab.get(L_INSTANCE_TYPE, "")),
                    str(lab.get(L_ZONE, "")),
                    str(lab.get(L_CAPACITY_TYPE, "")),
                    str(lab.get(L_ENVIRONMENT, "")),
                )
                for lab in labels
            ),
            own_pools,
        )


class Placements:
    """Each workload's spot replicas per capacity pool (by pool name) and its replicas."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = defaultdict(dict)
        self.replicas: dict[str, int] = {}

    def add(self, workload: str, pool: str, spot: bool, n: int = 1) -> None:
        """Count n replicas of `workload` placed in `pool` (only spot ones are counted)."""
        if workload and spot:
            held = self.counts[workload]
            held[pool] = held.get(pool, 0) + n

    def remove(self, workload: str, pool: str, spot: bool, n: int = 1) -> None:
        """Forget n replicas of `workload` in `pool` (one finished, evicted or reclaimed)."""
        if workload and spot and workload in self.counts:
            held = self.counts[workload]
            left = held.get(pool, 0) - n
            if left > 0:
                held[pool] = left
            else:
                held.pop(pool, None)

    def set_replicas(self, workload: str, replicas: int) -> None:
        """The workload's replicas as the scheduler knows them (bound or pending, not finished)."""
        if workload:
            self.replicas[workload] = int(replicas)

    def replicas_of(self, workload: str) -> int:
        """r: the known replicas, at least those counted in pools plus the pod being placed."""
        counted = sum(self.counts.get(workload, {}).values())
        return max(self.replicas.get(workload, 0), counted + 1)

    def full_pools(self, workload: str, k: int) -> tuple[int, int, dict[str, int]]:
        """(r, cap, {pool: count}) of the pools already holding cap of its spot replicas."""
        r = self.replicas_of(workload)
        cap = max_per_pool(r, k)
        held = self.counts.get(workload, {})
        return r, cap, {pool: n for pool, n in held.items() if n >= cap}


def spread_message(pool: str, held: int, replicas: int, k: int, cap: int) -> str:
    """The reason a spot node of `pool` fails a pod of a workload (names the pool and the arithmetic)."""
    return (
        f"capacity pool {pool} already holds {held} of the workload's spot replicas "
        f"(at most ceil({replicas}/{k}) = {cap} per pool)"
    )


@dataclass
class Verdict:
    """What `apply` changed: reasons in place, and per full pool the message its nodes carry."""

    spread_messages: dict[int, str] = field(default_factory=dict)  # pool id -> message


def apply(
    reasons: np.ndarray,
    node_idx: np.ndarray,
    spot: np.ndarray,
    layout: PoolLayout,
    pod: PodPlacement,
    placements: Placements | None,
    k: int,
    fit: int = 0,
) -> Verdict:
    """Mark candidates that still `fit` but break a pool rule, in place; vectorised over candidates.

    `node_idx` are the candidates' node indices in `layout` (negative: unknown nodes, whose
    reason is already not `fit`), `spot` whether each candidate is spot.
    """
    verdict = Verdict()
    ok = reasons == fit
    if not ok.any() or not len(layout.pool_of):
        return verdict
    where = np.clip(node_idx, 0, None)
    if layout.environments and not pod.daemon:
        env = layout.env_of.take(where)
        own = layout.environments.get(pod.namespace, -1)
        if own >= 0:
            bad = ok & (env != own)
            reasons[bad] = REASON_NOT_OWN_POOL
        else:
            bad = ok & (env >= 0)
            reasons[bad] = REASON_OTHER_TENANT_POOL
        ok &= ~bad
    if placements is None or not pod.workload or not ok.any():
        return verdict
    replicas, cap, full = placements.full_pools(pod.workload, k)
    if replicas < 2 or not full:
        return verdict
    ids = [layout.pool_index[p] for p in full if p in layout.pool_index]
    if not ids:
        return verdict
    pool = layout.pool_of.take(where)
    blocked = ok & spot & np.isin(pool, np.array(ids, dtype=np.int32))
    if blocked.any():
        reasons[blocked] = REASON_SPREAD
        for i in ids:
            name = layout.pools[i]
            verdict.spread_messages[i] = spread_message(name, full[name], replicas, k, cap)
    return verdict


def pool_environment(node_pool: Mapping[str, Any]) -> str:
    """The environment a Karpenter NodePool object is the own pool of ("" for a shared pool)."""
    template = ((node_pool.get("spec") or {}).get("template") or {}).get("metadata") or {}
    env = (template.get("labels") or {}).get(L_ENVIRONMENT)
    if not env:
        env = ((node_pool.get("metadata") or {}).get("labels") or {}).get(L_ENVIRONMENT)
    return env if isinstance(env, str) else ""


def cluster_placements(
    layout: PoolLayout,
    index: Mapping[str, int],
    spot: np.ndarray,
    pods: Iterable[Mapping[str, Any]],
    terminal: frozenset[str] = frozenset({"Succeeded", "Failed"}),
) -> Placements:
    """Each workload's replicas (its pods bound or pending, not finished, DaemonSets left out)
    and spot replicas per capacity pool, from the cluster's pods; `index` maps node names to
    their position in `layout` and `spot`."""
    out = Placements()
    sizes: dict[str, int] = defaultdict(int)
    for pod in pods:
        if ((pod.get("status") or {}).get("phase") or "") in terminal:
            continue
        who = pod_placement(pod)
        if not who.workload or who.daemon:
            continue
        sizes[who.workload] += 1
        i = index.get((pod.get("spec") or {}).get("nodeName") or "")
        if i is not None:
            out.add(who.workload, layout.pools[layout.pool_of[i]], bool(spot[i]))
    for workload, n in sizes.items():
        out.set_replicas(workload, n)
    return out
