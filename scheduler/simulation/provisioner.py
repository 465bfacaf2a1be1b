"""The simulated Karpenter: NodePools launch Nodes for unschedulable pods (disruption is
`simulation.disruption`'s, through `node_drain` here).

The decisions are `scheduler.karpenter`'s (pure); this module reads NodePools,
Nodes and Pods through the cluster interface, prices offerings from the price
book (`simulation.pricing`), writes what Karpenter would write (a Node and its
status; the `karpenter.sh/disrupted` taint, evictions and the Node's deletion
when it disrupts one), and audits each launch and each drain.

`node_drain` is the one way a node goes (disruption, spot reclaim, teardown):
taint, evict its pods (their controllers replace them elsewhere), delete it.
"""

from __future__ import annotations

import secrets
import string

import numpy as np
from django.conf import settings
from django.db import transaction

import audit
from kiln.cluster import AppliedRef, DeliveryBackend, ref_of
from kiln.cluster.base import desired_state
from kiln.cluster.nodes import (
    DISRUPTED_TAINT,
    L_ENVIRONMENT,
    L_NODEPOOL,
    UNSCHEDULABLE,
    is_daemon_pod,
    labels_of,
    name_of,
    node_list,
    node_manifest,
    node_status,
    pod_node,
    pod_scheduled_condition,
)
from kiln.identity.permissions import system_actor
from scheduler import karpenter, pools, scoring
from scheduler.extender.protocol import ProtocolError, pod_request
from scheduler.nodesync import TERMINAL_PHASES
from scheduler.simulation.pricing import allocatable, offerings, quantity
from scheduler.simulation.workloads import daemon_eligible

ACTOR = "karpenter"
INF = float("inf")
_SUFFIX = string.ascii_lowercase + string.digits


def _requirement(pool: dict, key: str) -> set[str] | None:
    """The values a NodePool's requirement allows for `key` (None: no In requirement)."""
    reqs = ((pool.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "requirements"
    ) or []
    allowed: set[str] | None = None
    excluded: set[str] = set()
    for r in reqs:
        if r.get("key") != key:
            continue
        if r.get("operator") == "In":
            values = set(r.get("values") or [])
            allowed = values if allowed is None else allowed & values
        elif r.get("operator") == "NotIn":
            excluded |= set(r.get("values") or [])
    if allowed is not None:
        return allowed - excluded
    return None if not excluded else {"__not__", *excluded}  # NotIn alone: filtered below


def daemon_overhead(
    daemon_sets: list[dict], labels: dict[str, str], taints: list[dict]
) -> tuple[float, float, float]:
    """What the DaemonSets whose pods would run on a node with these labels and taints request."""
    node = {"metadata": {"labels": labels}, "spec": {"taints": taints}}
    total = [0.0, 0.0, 0.0]
    for ds in daemon_sets:
        template = (ds.get("spec") or {}).get("template") or {}
        if not daemon_eligible(template.get("spec") or {}, node):
            continue
        try:
            req = pod_request(template)
        except ProtocolError:
            continue
        total = [total[0] + req.cpu, total[1] + req.memory, total[2] + req.gpu]
    return (total[0], total[1], total[2])


def pool_of(obj: dict, nodes: list[dict], daemon_sets: list[dict] | None = None) -> karpenter.Pool:
    """A NodePool object as the provisioner reads it, with the capacity its nodes hold now and
    the DaemonSet overhead of a new node."""
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    name = name_of(obj)
    types = _requirement(obj, karpenter.L_TYPE)
    zones = _requirement(obj, karpenter.L_ZONE)
    capacity = _requirement(obj, karpenter.L_CAPACITY) or {karpenter.ON_DEMAND}
    offers = offerings(
        types=None if types and "__not__" in types else types,
        zones=None if zones and "__not__" in zones else zones,
        capacity_types=capacity - {"__not__"},
    )
    for key, values in ((karpenter.L_TYPE, types), (karpenter.L_ZONE, zones)):
        if values and "__not__" in values:
            field = "instance_type" if key == karpenter.L_TYPE else "zone"
            offers = [o for o in offers if getattr(o, field) not in values]
    limits = spec.get("limits") or {}
    used = [0.0, 0.0, 0.0]
    for node in nodes:
        if labels_of(node).get(L_NODEPOOL) == name:
            for i, v in enumerate(allocatable(node)):
                used[i] += v
    budgets = (spec.get("disruption") or {}).get("budgets") or [{"nodes": "10%"}]
    allowed = {
        key: frozenset(values)
        for key, values in (
            (karpenter.L_TYPE, types),
            (karpenter.L_ZONE, zones),
            (karpenter.L_CAPACITY, _requirement(obj, karpenter.L_CAPACITY)),
        )
        if values is not None and "__not__" not in values
    }
    labels = dict(template.get("metadata", {}).get("labels") or {})
    return karpenter.Pool(
        name=name,
        environment=labels.get(L_ENVIRONMENT) or labels_of(obj).get(L_ENVIRONMENT, ""),
        labels=labels,
        taints=list(tspec.get("taints") or []),
        offerings=offers,
        limits=(
            quantity(limits.get("cpu"), INF),
            quantity(limits.get("memory"), INF),
            quantity(limits.get("nvidia.com/gpu"), INF),
        ),
        used=(used[0], used[1], used[2]),
        expire_after=karpenter.parse_duration(tspec.get("expireAfter")),
        consolidate_after=karpenter.parse_duration(
            (spec.get("disruption") or {}).get("consolidateAfter")
        ),
        budget=str(budgets[0].get("nodes", "10%")),
        termination_grace=karpenter.parse_duration(tspec.get("terminationGracePeriod")),
        consolidation_policy=str(
            (spec.get("disruption") or {}).get("consolidationPolicy") or "WhenEmpty"
        ),
        allowed=allowed,
        overhead=daemon_overhead(
            daemon_sets or [],
            {**labels, L_NODEPOOL: name},
            list(tspec.get("taints") or []),
        ),
    )


def _pending(pods: list[dict]) -> list[karpenter.PendingPod]:
    out = []
    for pod in pods:
        condition = pod_scheduled_condition(pod) or {}
        if pod_node(pod) or condition.get("reason") != UNSCHEDULABLE:
            continue
        try:
            req = pod_request(pod)
        except ProtocolError:
            continue
        out.append(
            karpenter.PendingPod(
                key=f"{pod['metadata'].get('namespace', '')}/{name_of(pod)}",
                cpu=req.cpu,
                memory=req.memory,
                gpu=req.gpu,
                spec=pod.get("spec") or {},
                needs_on_demand=req.workload_class == scoring.LATENCY_SENSITIVE,
            )
        )
    return out


def _with_pool_rules(
    pending: list[karpenter.PendingPod], pods: list[dict], nodes: list[dict]
) -> None:
    """Give each pending pod its namespace (own pools) and its workload's spread: the most spot
    replicas one capacity pool may hold and what each holds now (`pools`, as the extender)."""
    layout = pools.PoolLayout.from_labels([labels_of(n) for n in nodes])
    index = {name_of(n): i for i, n in enumerate(nodes)}
    spot = np.array([labels_of(n).get(karpenter.L_CAPACITY) == karpenter.SPOT for n in nodes])
    placements = pools.cluster_placements(layout, index, spot, pods, TERMINAL_PHASES)
    k_of = pools.parse_spread_k(settings.KILN_SCHEDULER_SPREAD_K)
    by_key = {f"{p['metadata'].get('namespace', '')}/{name_of(p)}": p for p in pods}
    for pending_pod in pending:
        who = pools.pod_placement(by_key.get(pending_pod.key) or {})
        pending_pod.namespace = who.namespace
        if not who.workload or who.daemon:
            continue
        request = by_key[pending_pod.key]
        k = k_of.get(scoring.workload_class_of(labels_of(request)), pools.DEFAULT_K)
        replicas, cap, _ = placements.full_pools(who.workload, k)
        if replicas >= 2:
            pending_pod.workload = who.workload
            pending_pod.cap = cap
            pending_pod.held = dict(placements.counts.get(who.workload, {}))


def pools_list(*, backend: DeliveryBackend, nodes: list[dict]) -> list[karpenter.Pool]:
    """Every live NodePool, read for the provisioner."""
    daemon_sets = backend.list("apps/v1", "DaemonSet", include_deleting=False)
    return [
        pool_of(p, nodes, daemon_sets)
        for p in backend.list("karpenter.sh/v1", "NodePool", include_deleting=False)
    ]


def generated_name(base: str) -> str:
    """A name made as Kubernetes' `generateName` makes one (Karpenter names a NodeClaim so):
    the base cut to 58 characters, then 5 random ones, so it is always a valid 63-character
    label value (a node's `kubernetes.io/hostname`)."""
    return base[:58] + "".join(secrets.choice(_SUFFIX) for _ in range(5))


def nodes_provision(*, backend: DeliveryBackend, pods: list[dict] | None = None) -> karpenter.Plan:
    """Launch the nodes Karpenter would for the unschedulable pods; audited per launch round."""
    nodes = node_list(backend)
    pods = pods if pods is not None else backend.list("v1", "Pod", include_deleting=False)
    pending = _pending(pods)
    if not pending:
        return karpenter.Plan()
    _with_pool_rules(pending, pods, nodes)
    pools = pools_list(backend=backend, nodes=nodes)
    plan = karpenter.plan_launches(pools, pending)
    if not plan.nodes:
        return plan
    by_name = {p.name: p for p in pools}
    manifests, statuses = [], []
    for planned in plan.nodes:
        pool, o = by_name[planned.pool], planned.offering
        name = generated_name(f"{pool.name}-")
        manifests.append(
            node_manifest(
                name=name,
                instance_type=o.instance_type,
                zone=o.zone,
                capacity_type=o.capacity_type,
                nodepool=pool.name,
                environment=pool.environment,
                labels=pool.labels,
                taints=pool.taints,
            )
        )
        statuses.append(
            (
                AppliedRef("v1", "Node", "", name),
                node_status(cpu=o.cpu, memory=int(o.memory), gpu=int(o.gpu)),
            )
        )
    with transaction.atomic():
        backend.apply(manifests, field_manager="karpenter")
        backend.update_status(statuses)
        audit.record(
            system_actor(ACTOR),
            "scheduler.nodes.launched",
            "scheduler:nodes",
            {
                "nodes": [
                    {
                        "node": name_of(m),
                        "nodepool": p.pool,
                        "instanceType": p.offering.instance_type,
                        "zone": p.offering.zone,
                        "capacityType": p.offering.capacity_type,
                        "hourly": p.offering.price,
                        "pods": p.pods,
                    }
                    for m, p in zip(manifests, plan.nodes, strict=True)
                ],
                "waiting": plan.waiting,
            },
        )
    return plan


def node_with(
    node: dict, *, annotations: dict[str, str | None] | None = None, taint: bool = False
) -> dict:
    """The node's desired state with annotations set (None removes) and, if asked, the disrupted taint."""
    body = desired_state(node)
    meta = body["metadata"]
    meta.pop("finalizers", None)
    meta.pop("uid", None)
    current = dict(meta.get("annotations") or {})
    for key, value in (annotations or {}).items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    meta["annotations"] = current
    if taint:
        taints = list((body.get("spec") or {}).get("taints") or [])
        if not any(t.get("key") == DISRUPTED_TAINT["key"] for t in taints):
            taints.append(dict(DISRUPTED_TAINT))
        body["spec"] = {**(body.get("spec") or {}), "taints": taints}
    return body


def node_drain(
    *, backend: DeliveryBackend, node: dict, reason: str, delete: bool = True
) -> list[str]:
    """Taint the node, evict its pods (their workloads replace them) and, unless told not to, delete it."""
    backend.apply([node_with(node, taint=True)], field_manager="karpenter")
    evicted = []
    for pod in backend.list("v1", "Pod", include_deleting=False):
        if pod_node(pod) == name_of(node) and not is_daemon_pod(pod):
            if backend.delete(ref_of(pod)):
                evicted.append(f"{pod['metadata'].get('namespace', '')}/{name_of(pod)}")
    if delete:
        backend.delete(AppliedRef("v1", "Node", "", name_of(node)))
    audit.record(
        system_actor(ACTOR),
        "scheduler.node.drained",
        f"scheduler:node:{name_of(node)}",
        {
            "reason": reason,
            "nodepool": labels_of(node).get(L_NODEPOOL, ""),
            "evicted": evicted,
            "deleted": delete,
        },
    )
    return evicted
