"""The simulated kube-scheduler: binds pending pods after the default filters, through Kiln's extender.

One scheduling pass, pod by pod as kube-scheduler's scheduling cycle runs:

1. the default filters (`scheduler.kubefilters`) over every live, schedulable
   node, against the scheduler's own cache of what is requested (a bound pod is
   assumed at once, before its binding is written); as kube-scheduler, only the
   first `num_feasible_nodes_to_find` feasible nodes (adaptive
   percentageOfNodesToScore: all below 100 nodes, 420 of 1,000) from a start
   index that moves round the node list cycle after cycle go on (`_sample`);
2. the extender's `filter` and then `prioritize` on those, through the
   scheduler's transport (`simulation.transport`): `extender_call` - the
   function the HTTP handler serves - in process, or HTTP to the served
   extender as kube-scheduler calls it - with the body kube-scheduler would
   send: `NodeNames` (`nodeCacheCapable: true`) or full `Nodes`
   (`nodeCacheCapable: false`). The extender answers from a snapshot of the very
   nodes this pass sees, priced from the same models as its inventory, rebuilt
   from the pass's cache at most every `KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS`, as
   the extender's own inventory snapshot is: between rebuilds its requested
   columns lag the scheduler's cache, which only the packing score reads (the
   default filters have already checked resources against the live cache);
3. the highest score wins (ties: the first in node order), and the pod is bound
   with the extender's explanation as the `kiln.dev/score-explanation` annotation.

A pod no node passes stays Pending with `PodScheduled=False, Unschedulable` and
kube-scheduler's `0/N nodes are available: ...` message. Bindings are written a
batch at a time (`bind_pods`); each batch is one audit event.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import orjson
from django.conf import settings
from django.db import transaction

import audit
from kiln.cluster import AppliedRef, DeliveryBackend
from kiln.cluster.nodes import (
    UNSCHEDULABLE,
    PodBinding,
    explanation_annotation,
    is_disrupting,
    labels_of,
    name_of,
    node_list,
    pod_node,
    pod_owner,
    pod_phase,
    pod_scheduled_condition,
    unschedulable_status,
)
from kiln.identity.permissions import system_actor
from scheduler import pools, scoring
from scheduler.extender.handler import FILTER, PRIORITIZE, extender_call
from scheduler.extender.protocol import ProtocolError, pod_request
from scheduler.extender.snapshot import NodeSnapshot
from scheduler.kubedefault import num_feasible_nodes_to_find
from scheduler.kubefilters import NodeTable, unschedulable_message
from scheduler.nodesync import TERMINAL_PHASES
from scheduler.simulation.pricing import PriceBook, scoring_rows
from scheduler.simulation.provisioner import daemon_overhead
from scheduler.simulation.transport import Transport

ACTOR = "kube-scheduler"
BIND_BATCH = 200
_SCORE = itemgetter("Score")


@dataclass
class SchedulePass:
    """What one pass did: pods bound (to which node), pods left Pending (why), per-pod bind latency."""

    bound: dict[str, str] = field(default_factory=dict)
    unschedulable: dict[str, str] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    spot_for_latency_sensitive: int = 0


def _key(pod: dict[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{name_of(pod)}"


def _table(
    nodes: list[dict],
    pods: list[dict],
    book: PriceBook | None,
    daemon_sets: list[dict] | None = None,
) -> tuple[NodeTable, np.ndarray, float]:
    """The pass's node table and scoring matrix, with every bound, non-terminal pod counted,
    and on a node still waiting for a DaemonSet's pod, what that pod will request: the
    DaemonSet's pods are bound to a node as it comes, outside this pass, and a node filled
    before they came would run over its allocatable (kube-scheduler's priorities would have
    the node-critical pod preempt; here its room is kept)."""
    matrix, max_price = scoring_rows(nodes, book)
    index = {name_of(n): i for i, n in enumerate(nodes)}
    running: set[tuple[str, str, str]] = set()
    for pod in pods:
        i = index.get(pod_node(pod))
        if i is None or pod_phase(pod) in TERMINAL_PHASES:
            continue
        kind, owner = pod_owner(pod)
        if kind == "DaemonSet":
            running.add((pod_node(pod), (pod.get("metadata") or {}).get("namespace", ""), owner))
        try:
            req = pod_request(pod)
        except ProtocolError:
            continue
        matrix[i, 3:6] += (req.cpu, req.memory, req.gpu)
    for ds in daemon_sets or ():
        meta = ds.get("metadata") or {}
        waiting = [
            n for n in nodes
            if (name_of(n), meta.get("namespace", ""), meta.get("name", "")) not in running
        ]  # fmt: skip
        for node in waiting:
            matrix[index[name_of(node)], 3:6] += daemon_overhead(
                [ds], labels_of(node), list((node.get("spec") or {}).get("taints") or [])
            )
    table = NodeTable(
        names=[name_of(n) for n in nodes],
        labels=[labels_of(n) for n in nodes],
        taints=[list((n.get("spec") or {}).get("taints") or []) for n in nodes],
        unschedulable=np.array([bool((n.get("spec") or {}).get("unschedulable")) for n in nodes]),
        allocatable=matrix[:, 0:3],
        requested=matrix[:, 3:6],
    )
    return table, matrix, max_price


def _failed_counts(result: dict[str, Any]) -> Counter:
    counts: Counter = Counter()
    for key in ("FailedNodes", "FailedAndUnresolvableNodes"):
        counts.update((result.get(key) or {}).values())
    return counts


class KubeScheduler:
    """One scheduling pass over the cluster's pending pods (see the module docstring)."""

    def __init__(
        self,
        *,
        backend: DeliveryBackend,
        node_cache_capable: bool = True,
        transport: Transport | None = None,
        pool_rules: bool = True,
    ) -> None:
        self.backend = backend
        # False hands the extender no pools (a measurement of what the pool rules cost).
        self.pool_rules = pool_rules
        self.node_cache_capable = node_cache_capable
        # In process unless told otherwise: the HTTP handler's own function (`transport`).
        self.transport: Transport = transport or self._in_process
        self._view: tuple[list[str], NodeSnapshot] | None = None
        self._view_until = 0.0
        self._next_start = 0  # kube-scheduler's nextStartNodeIndex
        self._name_array = np.array([], dtype=object)
        # The pass's capacity pools and own pools, and workloads' spot replicas per pool: the
        # live cache the extender's pool rules read (a binding is counted when assumed).
        self._layout: pools.PoolLayout | None = None
        self._placements: pools.Placements | None = None
        self._spread_k = pools.parse_spread_k(settings.KILN_SCHEDULER_SPREAD_K)

    def _snapshot(self, names, matrix, index, max_price) -> NodeSnapshot:
        """The extender's view of the pass's nodes: a copy of the cache, at most TTL seconds old."""
        now = time.monotonic()
        if self._view is None or now >= self._view_until or self._view[0] is not names:
            snapshot = NodeSnapshot(
                names,
                matrix.copy(),
                index=index,
                max_price=max_price,
                layout=self._layout,
                placements=self._placements,
                spread_k=self._spread_k,
            )
            self._view = (names, snapshot)
            self._view_until = now + settings.KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS
        return self._view[1]

    def current_snapshot(self) -> NodeSnapshot:
        """The snapshot the extender answers this cycle from (set before each call)."""
        if self._view is None:
            raise RuntimeError("no scheduling cycle has started")
        return self._view[1]

    def _in_process(self, verb: str, body: bytes) -> tuple[int, bytes]:
        return extender_call(verb, body, None, self.current_snapshot)

    def _body(self, pod: dict, names: list[str], nodes: list[dict]) -> bytes:
        if self.node_cache_capable:
            return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
        return orjson.dumps({"Pod": pod, "Nodes": {"items": nodes}, "NodeNames": None})

    def placements(
        self,
        nodes: list[dict],
        pods: list[dict],
        *,
        book: PriceBook | None = None,
        own_pools: list[str] | None = None,
        daemon_sets: list[dict] | None = None,
    ) -> Iterator[tuple[dict, PodBinding | str, float]]:
        """Each pending pod with its binding (or why it stays Pending) and when its cycle began.

        Writes nothing: a binding is assumed in the pass's cache before the next pod,
        and `run` writes them. `book` defaults to the price book in the database;
        `own_pools` are the environments whose own NodePool exists (with or without nodes);
        `daemon_sets` keep room on each node for their pods not bound there yet (`_table`).
        """
        pending = [p for p in pods if not pod_node(p) and pod_phase(p) == "Pending"]
        if not pending:
            return
        table, matrix, max_price = _table(nodes, pods, book, daemon_sets)
        names = table.names
        self._name_array = np.array(names, dtype=object)
        index = {n: i for i, n in enumerate(names)}
        if self.pool_rules:
            self._layout = pools.PoolLayout.from_labels(table.labels, own_pools or ())
            self._placements = pools.cluster_placements(
                self._layout, index, matrix[:, 8] > 0.5, pods, TERMINAL_PHASES
            )
        self._view = None  # a new pass: the extender's view is rebuilt with its pools
        for pod in pending:
            started = time.perf_counter()
            yield pod, self._one(pod, nodes, table, matrix, names, index, max_price), started

    def run(self, *, pods: list[dict] | None = None) -> SchedulePass:
        """Schedule every pending pod once; returns what was bound and what stays Pending."""
        result = SchedulePass()
        nodes = [n for n in node_list(self.backend) if not is_disrupting(n)]
        if pods is None:
            pods = self.backend.list("v1", "Pod", include_deleting=False)
        batch: list[tuple[PodBinding, float]] = []
        waiting: list[tuple[dict, str]] = []
        own = [
            pools.pool_environment(p)
            for p in self.backend.list("karpenter.sh/v1", "NodePool", include_deleting=False)
        ]
        daemon_sets = self.backend.list("apps/v1", "DaemonSet", include_deleting=False)
        for pod, outcome, started in self.placements(
            nodes, pods, own_pools=[e for e in own if e], daemon_sets=daemon_sets
        ):
            if isinstance(outcome, str):
                waiting.append((pod, outcome))
                continue
            batch.append((outcome, started))
            if len(batch) >= BIND_BATCH:
                self._flush(batch, result)
                batch = []
        self._flush(batch, result)
        self._mark_unschedulable(waiting, result)
        return result

    def _one(self, pod, nodes, table, matrix, names, index, max_price) -> PodBinding | str:
        """Place one pod: its binding, or kube-scheduler's message for why it stays Pending."""
        try:
            req = pod_request(pod)
        except ProtocolError as exc:
            return f"pod has malformed requests: {exc}"
        request = np.array([req.cpu, req.memory, req.gpu])
        ok, counts = table.feasible(pod.get("spec") or {}, request)
        found = self._sample(ok)
        if not found.size:
            return unschedulable_message(len(names), counts)
        candidates = self._name_array[found].tolist()
        self._snapshot(names, matrix, index, max_price)  # what the extender answers from
        objects = [nodes[i] for i in found] if not self.node_cache_capable else []
        status, raw = self.transport(FILTER, self._body(pod, candidates, objects))
        try:
            filtered = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return f"extender filter failed: HTTP {status}, not JSON"
        if status != 200 or filtered.get("Error"):
            return f"extender filter failed: {filtered.get('Error') or status}"
        passing = filtered.get("NodeNames")
        if passing is None:
            passing = [name_of(n) for n in (filtered.get("Nodes") or {}).get("items") or []]
        if not passing:
            counts.update(_failed_counts(filtered))
            return unschedulable_message(len(names), counts)
        objects = [nodes[index[n]] for n in passing] if not self.node_cache_capable else []
        status, raw = self.transport(PRIORITIZE, self._body(pod, passing, objects))
        if status != 200:
            return f"extender prioritize failed: HTTP {status}"
        hosts = orjson.loads(raw)
        values = np.fromiter(map(_SCORE, hosts), dtype=np.int64, count=len(hosts))
        top = np.argsort(-values, kind="stable")[:3]  # stable: the first of equal scores wins
        best = hosts[int(top[0])]["Host"]
        scores = {hosts[int(j)]["Host"]: int(values[j]) for j in top}
        i = index[best]
        table.assume(i, request)  # matrix columns 3:6 are the table's requested cache
        if self._placements is not None and self._layout is not None:
            who = pools.pod_placement(pod)
            if not who.daemon:
                pool = self._layout.pools[self._layout.pool_of[i]]
                self._placements.add(who.workload, pool, bool(matrix[i, 8] > 0.5))
        ranked = list(scores)
        explanation = {
            "node": best,
            "score": scores.get(best, 0),
            "workloadClass": req.workload_class,
            "capacityType": "spot" if matrix[i, 8] > 0.5 else "on-demand",
            "hourly": None if np.isnan(matrix[i, 6]) else round(float(matrix[i, 6]), 4),
            "candidates": len(candidates),
            "feasibleNodes": int(np.count_nonzero(ok)),
            "passedExtender": len(passing),
            "extenderRejected": dict(_failed_counts(filtered)),
            "defaultFilterRejected": dict(counts),
            "top": [{"node": n, "score": scores.get(n, 0)} for n in ranked],
            "nodeCacheCapable": self.node_cache_capable,
        }
        return PodBinding(
            pod["metadata"].get("namespace", ""),
            name_of(pod),
            best,
            explanation_annotation(explanation),
        )

    def _sample(self, ok: np.ndarray) -> np.ndarray:
        """The feasible nodes kube-scheduler hands the extenders, as node indices in its order.

        schedule_one.go `findNodesThatPassFilters`: the nodes are checked from
        nextStartNodeIndex round the list, and checking stops once
        `numFeasibleNodesToFind` (adaptive percentageOfNodesToScore: all nodes
        below 100, 42% of 1,000) have passed; the next cycle starts after the last
        node checked.
        """
        total = len(ok)
        start = self._next_start % total if total else 0
        positions = np.flatnonzero(np.roll(ok, -start))
        want = num_feasible_nodes_to_find(total)
        if positions.size > want:
            positions = positions[:want]
            processed = int(positions[-1]) + 1
        else:
            processed = total
        self._next_start = (start + processed) % total if total else 0
        return (positions + start) % total

    def _flush(self, batch: list[tuple[PodBinding, float]], result: SchedulePass) -> None:
        if not batch:
            return
        bindings = [b for b, _ in batch]
        with transaction.atomic():
            self.backend.bind_pods(bindings)
            audit.record(
                system_actor(ACTOR),
                "scheduler.pods.bound",
                "scheduler:pods",
                {"bindings": [[f"{b.namespace}/{b.name}", b.node] for b in bindings]},
            )
        done = time.perf_counter()
        for binding, started in batch:
            result.bound[f"{binding.namespace}/{binding.name}"] = binding.node
            result.latencies.append(done - started)

    def _mark_unschedulable(self, waiting: list[tuple[dict, str]], result: SchedulePass) -> None:
        updates = []
        for pod, message in waiting:
            result.unschedulable[_key(pod)] = message
            condition = pod_scheduled_condition(pod) or {}
            if condition.get("reason") == UNSCHEDULABLE and condition.get("message") == message:
                continue  # already says so: no write
            ref = AppliedRef("v1", "Pod", pod["metadata"].get("namespace", ""), name_of(pod))
            updates.append((ref, unschedulable_status(message)))
        if updates:
            self.backend.update_status(updates)


def latency_sensitive_on_spot(backend: DeliveryBackend) -> list[str]:
    """Pods bound to spot nodes whose class is latency-sensitive (or missing): the guarantee says none."""
    spot = {name_of(n) for n in node_list(backend, capacity_type="spot", include_deleting=True)}
    return [
        _key(p)
        for p in backend.list("v1", "Pod")
        if pod_node(p) in spot
        and scoring.workload_class_of(labels_of(p)) == scoring.LATENCY_SENSITIVE
    ]
