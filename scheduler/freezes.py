"""Disruption freezes: the nodes under Kiln's own work carry `karpenter.sh/do-not-disrupt`.

While a rollout is analysing or a chaos experiment holds its lease, Karpenter must not
consolidate, drift-replace or expire the nodes its pods run on: the rollout's evidence
or the experiment's measurement would be Karpenter's. The holder (canary, chaos) names
itself and its pods' nodes; this module keeps one `DisruptionFreeze` row per node and
holder and makes the cluster match the rows:

1. `disruption_freeze_hold` writes the intent in one transaction (new rows for the nodes
   the holder's pods now run on, released rows for the nodes they left, the others
   renewed) and audits what changed; nothing touches the cluster under its row locks;
2. then, outside any transaction, `freezes_apply` reads the nodes and annotates them
   through the cluster interface (`annotate`): a node with an open freeze carries
   `karpenter.sh/do-not-disrupt: "true"` and `kiln.dev/frozen-by` (its holders); a node
   whose last freeze was released loses both; then the rows are marked applied or
   lifted, audited per node (`scheduler.node.frozen`, `scheduler.node.unfrozen`);
3. `disruption_freezes_reap` (the beat task, and the chaos reaper's pass) releases every
   freeze whose holder stopped renewing it (`renewed_at + lease_seconds` passed: Kiln
   died, or the holder's lease lapsed) or whose hard bound passed (`bound_at`), then
   applies every node, so a crash between any two steps converges on the next pass.

Only annotations Kiln put there are removed: a node without `kiln.dev/frozen-by` keeps
a `do-not-disrupt` someone else set. The bound is Kiln's; the simulated Karpenter keeps
its own (expiry past the NodePool's terminationGracePeriod wins: scheduler/karpenter.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit import record
from kiln.cluster import AppliedRef, DeliveryBackend, DeliveryError, match_labels
from kiln.cluster.backends import get_backend
from kiln.cluster.nodes import (
    A_DO_NOT_DISRUPT,
    A_FROZEN_BY,
    annotations_of,
    name_of,
    pod_node,
    pod_phase,
)
from kiln.errors import Forbidden
from kiln.identity.permissions import (
    Actor,
    can_hold_disruption_freeze,
    can_reap_disruption_freezes,
    system_actor,
)
from scheduler.models import DisruptionFreeze

log = logging.getLogger("kiln.scheduler")

REAPER = system_actor("scheduler-node-sync")
RUNNING_PHASES = frozenset({"Pending", "Running"})


@dataclass(frozen=True)
class Holder:
    """Who freezes: a rollout or an experiment, for people its label and team, its bounds.

    `started_at + max_seconds` is the hard bound (never later than the platform's
    `KILN_DISRUPTION_FREEZE_MAX_SECONDS` from `started_at`); `lease_seconds` is how long a
    freeze outlives the holder's last renewal.
    """

    kind: str
    id: str
    label: str
    team: str
    started_at: datetime
    max_seconds: float
    lease_seconds: float

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.id}"

    def bound(self) -> datetime:
        """When every freeze of this holder ends, whatever the holder says."""
        limit = min(float(self.max_seconds), float(settings.KILN_DISRUPTION_FREEZE_MAX_SECONDS))
        return self.started_at + timedelta(seconds=max(limit, 0.0))


@dataclass
class FreezeChange:
    """What one call changed: nodes frozen anew, released, and nodes annotated or cleared."""

    frozen: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    annotated: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "frozen": self.frozen,
            "released": self.released,
            "annotated": self.annotated,
            "cleared": self.cleared,
        }


def holder_nodes(backend: DeliveryBackend, *, namespace: str, selector: dict[str, str]) -> set[str]:
    """The nodes the live pods of `namespace` matching `selector` (matchLabels) are bound to.

    An empty selector matches nothing here: a freeze names the pods it protects.
    """
    if not selector:
        return set()
    text = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    pods = backend.list("v1", "Pod", namespace, text, include_deleting=False)
    return {
        pod_node(p)
        for p in pods
        if pod_node(p)
        and pod_phase(p) in RUNNING_PHASES
        and match_labels((p.get("metadata") or {}).get("labels"), text)
    }


def disruption_freeze_hold(
    *,
    holder: Holder,
    nodes: set[str],
    actor: Actor,
    backend: DeliveryBackend | None = None,
    now: datetime | None = None,
) -> FreezeChange:
    """Freeze exactly `nodes` for `holder` (renewing its lease), then make those nodes match.

    Past the holder's hard bound nothing is frozen and every freeze it has is released.
    """
    if not can_hold_disruption_freeze(actor):
        raise Forbidden(f"{actor} may not freeze nodes against disruption")
    now = now or timezone.now()
    bound = holder.bound()
    wanted = set() if now >= bound else set(nodes)
    reason = "hard bound reached" if now >= bound else "its pods left the node"
    for attempt in range(2):
        try:
            change = _hold(holder, wanted, bound, reason, actor, now)
            break
        except IntegrityError:  # a concurrent hold of the same holder froze a node first
            if attempt:
                raise
    touched = set(change.frozen) | set(change.released)
    if touched:
        applied = freezes_apply(backend=backend, nodes=touched, actor=actor)
        change.annotated, change.cleared = applied.annotated, applied.cleared
    return change


def _hold(
    holder: Holder, wanted: set[str], bound: datetime, reason: str, actor: Actor, now: datetime
) -> FreezeChange:
    change = FreezeChange()
    with transaction.atomic():
        open_rows = {
            row.node: row
            for row in DisruptionFreeze.objects.select_for_update().filter(
                holder_kind=holder.kind, holder_id=holder.id, released_at__isnull=True
            )
        }
        change.released = sorted(set(open_rows) - wanted)
        change.frozen = sorted(wanted - set(open_rows))
        if change.released:
            DisruptionFreeze.objects.filter(
                pk__in=[open_rows[n].pk for n in change.released]
            ).update(released_at=now, release_reason=reason)
        kept = [open_rows[n].pk for n in set(open_rows) & wanted]
        if kept:
            DisruptionFreeze.objects.filter(pk__in=kept).update(renewed_at=now)
        DisruptionFreeze.objects.bulk_create(
            [
                DisruptionFreeze(
                    node=node,
                    holder_kind=holder.kind,
                    holder_id=holder.id,
                    holder_label=holder.label[:200],
                    team=holder.team,
                    since=now,
                    bound_at=max(bound, now),
                    renewed_at=now,
                    lease_seconds=max(float(holder.lease_seconds), 1.0),
                )
                for node in change.frozen
            ]
        )
        if change.frozen or change.released:
            record(
                actor,
                "scheduler.freeze.changed",
                f"scheduler:freeze:{holder.key}",
                {
                    "holder": holder.key,
                    "label": holder.label,
                    "frozen": change.frozen,
                    "released": change.released,
                    "release_reason": reason if change.released else "",
                    "bound_at": bound.isoformat(),
                },
            )
    return change


def disruption_freeze_release(
    *,
    kind: str,
    holder_id: str,
    reason: str,
    actor: Actor,
    backend: DeliveryBackend | None = None,
    now: datetime | None = None,
) -> FreezeChange:
    """Release every open freeze of one holder (it is done), then clear its nodes."""
    if not (can_hold_disruption_freeze(actor) or can_reap_disruption_freezes(actor)):
        raise Forbidden(f"{actor} may not release disruption freezes")
    now = now or timezone.now()
    rows = DisruptionFreeze.objects.filter(
        holder_kind=kind, holder_id=str(holder_id), released_at__isnull=True
    )
    released = _release(rows, reason=reason, actor=actor, now=now)
    change = FreezeChange(released=released)
    if released:
        applied = freezes_apply(backend=backend, nodes=set(released), actor=actor)
        change.annotated, change.cleared = applied.annotated, applied.cleared
    return change


def _release(rows: Any, *, reason: str, actor: Actor, now: datetime) -> list[str]:
    """Mark `rows` (a queryset of open freezes) released, audited per holder; the nodes released."""
    released: list[str] = []
    with transaction.atomic():
        by_holder: dict[str, list[str]] = {}
        for row in rows.select_for_update().filter(released_at__isnull=True):
            by_holder.setdefault(f"{row.holder_kind}/{row.holder_id}", []).append(row.node)
        if not by_holder:
            return []
        rows.filter(released_at__isnull=True).update(released_at=now, release_reason=reason[:200])
        for key, nodes in sorted(by_holder.items()):
            record(
                actor,
                "scheduler.freeze.changed",
                f"scheduler:freeze:{key}",
                {"holder": key, "frozen": [], "released": sorted(nodes), "release_reason": reason},
            )
            released.extend(nodes)
    return sorted(set(released))


def disruption_freezes_reap(
    *, actor: Actor = REAPER, backend: DeliveryBackend | None = None, now: datetime | None = None
) -> FreezeChange:
    """Release freezes whose holder stopped renewing or whose hard bound passed; apply every node."""
    if not can_reap_disruption_freezes(actor):
        raise Forbidden(f"{actor} may not reap disruption freezes")
    now = now or timezone.now()
    change = FreezeChange()
    open_rows = list(DisruptionFreeze.objects.filter(released_at__isnull=True))
    over = [r.pk for r in open_rows if r.bound_at <= now]
    lapsed = [
        r.pk
        for r in open_rows
        if r.pk not in over and r.renewed_at + timedelta(seconds=r.lease_seconds) < now
    ]
    for pks, reason in ((over, "hard bound reached"), (lapsed, "holder stopped renewing")):
        if pks:
            change.released += _release(
                DisruptionFreeze.objects.filter(pk__in=pks), reason=reason, actor=actor, now=now
            )
    applied = freezes_apply(backend=backend, nodes=None, actor=actor)
    change.annotated, change.cleared = applied.annotated, applied.cleared
    return change


def freezes_apply(
    *, backend: DeliveryBackend | None, nodes: set[str] | None, actor: Actor
) -> FreezeChange:
    """Make `nodes` (None: every node) carry the annotations their open freezes call for.

    Outside any transaction: it reads and writes the cluster. The nodes are read before the
    rows, so a freeze whose annotation is seen on a node is seen in the rows too. A node that
    is gone releases and lifts its freezes.
    """
    if not (can_hold_disruption_freeze(actor) or can_reap_disruption_freezes(actor)):
        raise Forbidden(f"{actor} may not mark nodes against disruption")
    backend = backend or get_backend()
    change = FreezeChange()
    live = _nodes(backend, nodes)
    rows = DisruptionFreeze.objects.filter(lifted_at__isnull=True)
    if nodes is not None:
        rows = rows.filter(node__in=nodes)
    by_node: dict[str, list[DisruptionFreeze]] = {}
    for row in rows.order_by("node", "holder_kind", "holder_id"):
        by_node.setdefault(row.node, []).append(row)
    names = set(by_node) | {n for n, obj in live.items() if A_FROZEN_BY in annotations_of(obj)}
    for node in sorted(names):
        obj = live.get(node)
        mine = by_node.get(node, [])
        holders = sorted({f"{r.holder_kind}/{r.holder_id}" for r in mine if r.is_open})
        if obj is None:
            _node_gone(node, mine, actor)
            continue
        current = annotations_of(obj)
        if holders:
            want = {A_DO_NOT_DISRUPT: "true", A_FROZEN_BY: ",".join(holders)}
            if any(current.get(k) != v for k, v in want.items()):
                if not _annotate(backend, node, want):
                    continue
                change.annotated.append(node)
        elif A_FROZEN_BY in current:
            if not _annotate(backend, node, {A_DO_NOT_DISRUPT: None, A_FROZEN_BY: None}):
                continue
            change.cleared.append(node)
        _mark(node, mine, holders, actor)
    return change


def _nodes(backend: DeliveryBackend, nodes: set[str] | None) -> dict[str, dict]:
    """The live Nodes by name: all of them, or those named (one read each)."""
    if nodes is None:
        return {name_of(n): n for n in backend.list("v1", "Node", None, include_deleting=False)}
    found = {}
    for name in sorted(nodes):
        obj = backend.get("v1", "Node", None, name)
        if obj is not None and not (obj.get("metadata") or {}).get("deletionTimestamp"):
            found[name] = obj
    return found


def _annotate(backend: DeliveryBackend, node: str, annotations: dict[str, str | None]) -> bool:
    """One node's annotations; a failed write is logged and left for the next pass."""
    try:
        return backend.annotate(AppliedRef("v1", "Node", "", node), annotations)
    except DeliveryError:
        log.warning("could not annotate node %s", node, exc_info=True)
        return False


def _mark(node: str, rows: list[DisruptionFreeze], holders: list[str], actor: Actor) -> None:
    """After the node matches: open rows applied, released rows lifted; audited if any moved."""
    now = timezone.now()
    with transaction.atomic():
        applied = DisruptionFreeze.objects.filter(
            pk__in=[r.pk for r in rows if r.is_open], applied_at__isnull=True
        ).update(applied_at=now)
        lifted_rows = [r for r in rows if not r.is_open]
        lifted = DisruptionFreeze.objects.filter(
            pk__in=[r.pk for r in lifted_rows], lifted_at__isnull=True
        ).update(lifted_at=now)
        if applied and holders:
            record(actor, "scheduler.node.frozen", f"scheduler:node:{node}", {"holders": holders})
        if lifted:
            record(
                actor,
                "scheduler.node.unfrozen" if not holders else "scheduler.node.freeze_lifted",
                f"scheduler:node:{node}",
                {
                    "released": [
                        {"holder": f"{r.holder_kind}/{r.holder_id}", "reason": r.release_reason}
                        for r in lifted_rows
                    ],
                    "holders": holders,
                },
            )


def _node_gone(node: str, rows: list[DisruptionFreeze], actor: Actor) -> None:
    """The node is gone (reclaimed, drained): its freezes are released and lifted, audited."""
    if not rows:
        return
    now = timezone.now()
    with transaction.atomic():
        pks = [r.pk for r in rows]
        DisruptionFreeze.objects.filter(pk__in=pks, released_at__isnull=True).update(
            released_at=now, release_reason="node gone"
        )
        lifted = DisruptionFreeze.objects.filter(pk__in=pks, lifted_at__isnull=True).update(
            lifted_at=now
        )
        if lifted:
            record(
                actor,
                "scheduler.node.unfrozen",
                f"scheduler:node:{node}",
                {
                    "released": [
                        {"holder": f"{r.holder_kind}/{r.holder_id}", "reason": "node gone"}
                        for r in rows
                    ],
                    "holders": [],
                },
            )
