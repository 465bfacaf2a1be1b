"""Writes of the scheduler app: node inventory sync and stored replay reports (each audited)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

import audit
from kiln.cluster.nodes import L_CAPACITY_TYPE, L_ENVIRONMENT, L_INSTANCE_TYPE, L_NODEPOOL, L_ZONE
from kiln.errors import Forbidden, InvalidInput
from kiln.identity.permissions import can_store_replay, can_sync_nodes
from scheduler import selectors
from scheduler.commitment import Commitment
from scheduler.models import (
    CapacityType,
    CommitmentSample,
    Node,
    NodeLifetime,
    NodeSource,
    ReplayReport,
)


@dataclass(frozen=True)
class ObservedNode:
    """A node as a source reports it: labels, allocatable and the sum of its pods' requests."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocatable_cpu_millis: int = 0
    allocatable_memory_bytes: int = 0
    allocatable_gpus: int = 0
    requested_cpu_millis: int = 0
    requested_memory_bytes: int = 0
    requested_gpus: int = 0
    launched_at: datetime | None = None  # metadata.creationTimestamp, when the source gives it
    # Per workload with pods bound here: [its pods on this node, its replicas in the cluster].
    workloads: dict[str, list[int]] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """Node column values derived from the observation (capacity type, type and zone from labels)."""
        raw = self.labels.get(L_CAPACITY_TYPE)
        capacity = (
            raw
            if raw in CapacityType.values and raw != CapacityType.UNKNOWN
            else CapacityType.UNKNOWN
        )
        return {
            "labels": dict(self.labels),
            "capacity_type": capacity,
            "instance_type": self.labels.get(L_INSTANCE_TYPE, "")[:64],
            "zone": self.labels.get(L_ZONE, "")[:64],
            "allocatable_cpu_millis": max(0, int(self.allocatable_cpu_millis)),
            "allocatable_memory_bytes": max(0, int(self.allocatable_memory_bytes)),
            "allocatable_gpus": max(0, int(self.allocatable_gpus)),
            "requested_cpu_millis": max(0, int(self.requested_cpu_millis)),
            "requested_memory_bytes": max(0, int(self.requested_memory_bytes)),
            "workloads": {str(k): [int(v[0]), int(v[1])] for k, v in self.workloads.items()},
            "requested_gpus": max(0, int(self.requested_gpus)),
        }


@dataclass
class SyncResult:
    """Names of the nodes a sync created, updated and deleted."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


def _validate_source(source: str) -> None:
    if source not in NodeSource.values:
        raise InvalidInput(f"unknown node source {source!r}", extra={"sources": NodeSource.values})


def _upsert(
    *, node: ObservedNode, source: str, now: datetime, result: SyncResult, existing: Node | None
) -> None:
    """Create the node's row or bring it up to date, noting which in `result`."""
    values = node.fields()
    if existing is None:
        Node.objects.create(name=node.name, source=source, synced_at=now, **values)
        result.created.append(node.name)
        return
    if existing.source != source or any(getattr(existing, k) != v for k, v in values.items()):
        for key, value in values.items():
            setattr(existing, key, value)
        existing.source = source
        existing.synced_at = now
        existing.save()
        result.updated.append(node.name)


def _track_lifetimes(
    *, observed: list[ObservedNode], removed: list[str], now: datetime
) -> tuple[list[str], list[str]]:
    """Open a lifetime for each observed node without one, close those of removed nodes.

    Returns (launched, removed) names. A launch time is the node's creationTimestamp
    when the source gives one (never later than now), else the time it was first seen.
    """
    names = [n.name for n in observed]
    open_names = set(
        NodeLifetime.objects.filter(removed_at__isnull=True, name__in=names).values_list(
            "name", flat=True
        )
    )
    launched = []
    for node in observed:
        if node.name in open_names:
            continue
        fields = node.fields()
        NodeLifetime.objects.create(
            name=node.name,
            environment=node.labels.get(L_ENVIRONMENT, "")[:63],
            nodepool=node.labels.get(L_NODEPOOL, "")[:253],
            instance_type=fields["instance_type"],
            zone=fields["zone"],
            capacity_type=fields["capacity_type"],
            launched_at=min(node.launched_at or now, now),
        )
        launched.append(node.name)
    closing = NodeLifetime.objects.filter(removed_at__isnull=True, name__in=removed)
    closed = sorted(closing.values_list("name", flat=True))
    closing.update(removed_at=now)
    return launched, closed


def node_sync(*, actor: Any, source: str, observed: list[ObservedNode]) -> SyncResult:
    """Make the source's nodes match `observed` (create, update, delete) and audit what changed."""
    if not can_sync_nodes(actor):
        raise Forbidden(f"{actor} may not write the node inventory")
    _validate_source(source)
    names = [n.name for n in observed]
    if len(set(names)) != len(names) or not all(names):
        raise InvalidInput("observed nodes need distinct, non-empty names")
    result = SyncResult()
    now = timezone.now()
    with transaction.atomic():
        known = Node.objects.select_for_update().in_bulk(names, field_name="name")
        for node in observed:
            _upsert(node=node, source=source, now=now, result=result, existing=known.get(node.name))
        gone = Node.objects.filter(source=source).exclude(name__in=names)
        result.deleted = sorted(gone.values_list("name", flat=True))
        gone.delete()
        launched, removed = _track_lifetimes(observed=observed, removed=result.deleted, now=now)
        if result.changed or launched or removed:
            audit.record(
                actor,
                "scheduler.nodes.synced",
                f"scheduler:nodes:{source}",
                {
                    "source": source,
                    "created": result.created,
                    "updated": result.updated,
                    "deleted": result.deleted,
                    "launched": launched,
                    "removed": removed,
                },
            )
            transaction.on_commit(selectors.snapshot_invalidate)
    return result


def node_apply_event(*, actor: Any, source: str, event: str, node: ObservedNode) -> SyncResult:
    """Apply one watch event (ADDED, MODIFIED, DELETED) for a node and audit it if it changed anything."""
    if not can_sync_nodes(actor):
        raise Forbidden(f"{actor} may not write the node inventory")
    _validate_source(source)
    if event not in {"ADDED", "MODIFIED", "DELETED"}:
        raise InvalidInput(f"unknown watch event {event!r}")
    result = SyncResult()
    with transaction.atomic():
        now = timezone.now()
        if event == "DELETED":
            deleted, _ = Node.objects.filter(name=node.name, source=source).delete()
            if deleted:
                result.deleted.append(node.name)
            _track_lifetimes(observed=[], removed=[node.name], now=now)
        else:
            existing = Node.objects.select_for_update().filter(name=node.name).first()
            _upsert(node=node, source=source, now=now, result=result, existing=existing)
            _track_lifetimes(observed=[node], removed=[], now=now)
        if result.changed:
            audit.record(
                actor,
                "scheduler.node.synced",
                f"scheduler:node:{node.name}",
                {"source": source, "event": event, "capacity_type": node.fields()["capacity_type"]},
            )
            transaction.on_commit(selectors.snapshot_invalidate)
    return result


def replay_report_store(*, actor: Any, report: dict[str, Any]) -> ReplayReport:
    """Store one replay report (the command's JSON) for the results page, audited."""
    if not can_store_replay(actor):
        raise Forbidden(f"{actor} may not store replay reports")
    required = ("parts", "seed", "nodes", "placements", "latency_class_placements", "runs")
    missing = [k for k in required if k not in report]
    if missing or not isinstance(report.get("runs"), list):
        raise InvalidInput("replay report is incomplete", extra={"missing": missing})
    with transaction.atomic():
        stored = ReplayReport.objects.create(
            created_at=timezone.now(),
            parts=str(report["parts"])[:64],
            seed=int(report["seed"]),
            nodes=int(report["nodes"]),
            placements=int(report["placements"]),
            latency_class_placements=int(report["latency_class_placements"]),
            parse_seconds=float(report.get("parse_seconds", 0.0)),
            report=report,
        )
        audit.record(
            actor,
            "scheduler.replay.stored",
            stored,
            {"parts": stored.parts, "seed": stored.seed, "runs": len(report["runs"])},
        )
    return stored


def commitment_sample_store(
    *, actor: Any, figures: Commitment, nodes: int
) -> CommitmentSample | None:
    """Store the cluster's Workload Commitment if it differs from the last sample.

    A sample is a metric, not an audit event: the chain records changes (the node sync's
    launches and removals say what moved), not measurements. A steady cluster writes
    nothing: the chart's line holds its last value until it moves.
    """
    if not can_sync_nodes(actor):
        raise Forbidden(f"{actor} may not write commitment samples")
    data = figures.as_dict(per_node=False)
    with transaction.atomic():
        last = CommitmentSample.objects.select_for_update().order_by("-taken_at").first()
        if last is not None and last.figures == data and last.nodes == nodes:
            return None
        return CommitmentSample.objects.create(taken_at=timezone.now(), nodes=nodes, figures=data)
