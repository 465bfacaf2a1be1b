"""Spot reclaims: spot nodes are interrupted at the price book's rates, with the two-minute notice.

A spot node of interruption bucket b is reclaimed at the band's midpoint
frequency per month (`<5%` 2.5%, `5-10%` 7.5%, ... `>20%` 25%: the scorer's
likelihood times 25%), as a Poisson process: over `dt` seconds the chance is
`1 - exp(-rate * dt)` with `rate = monthly / (30 days) * KILN_SIM_SPOT_RECLAIM_SCALE`
(1 is the real rate; the standalone demo scales it up so a reclaim is seen in
minutes). A spot node with no quote is reclaimed at the worst band's rate.

On the notice, as EC2 and Karpenter do: a `v1 Event` (`SpotInterrupted`, with
the two-minute warning) on the Node, the `kiln.dev/reclaim-at` annotation, the
`karpenter.sh/disrupted` taint and every pod evicted (their workloads place
them again). When the notice runs out the Node goes. Both steps are audited
(`scheduler.node.reclaim_noticed`, `scheduler.node.reclaimed`).
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from prometheus_client import Counter

import audit
from kiln.cluster import AppliedRef, DeliveryBackend
from kiln.cluster.nodes import (
    A_RECLAIM_AT,
    L_ENVIRONMENT,
    L_INSTANCE_TYPE,
    L_NODEPOOL,
    L_ZONE,
    SPOT,
    annotations_of,
    labels_of,
    name_of,
    node_list,
    pod_list,
    pod_owner,
)
from kiln.identity.permissions import system_actor
from scheduler import scoring, selectors
from scheduler.simulation.provisioner import node_drain, node_with

ACTOR = "karpenter"
MONTH_SECONDS = 30 * 86400
TOP_BAND = 0.25  # the midpoint of the >20% band, the likelihood's denominator
NOTICE_MESSAGE = "Spot interruption warning: the instance will be reclaimed in two minutes"
# Pods evicted by a reclaim notice, by workload class: a latency-sensitive one means the filter
# that keeps them off spot was bypassed (an alert, deploy/monitoring/prometheus-rules.yaml).
SPOT_RECLAIMED_PODS = Counter(
    "kiln_scheduler_spot_reclaimed_pods_total",
    "Pods evicted by a spot reclaim notice, by workload class",
    ["workload_class"],
)


def monthly_rate(bucket: int | None) -> float:
    """Interruptions per month of a spot node in `bucket` (None: unknown, the worst band)."""
    likelihoods = [v for _, v in scoring.INTERRUPTION_BUCKETS]
    likelihood = (
        likelihoods[bucket] if bucket is not None and 0 <= bucket < len(likelihoods) else 1.0
    )
    return likelihood * TOP_BAND


def reclaim_probability(bucket: int | None, seconds: float, scale: float) -> float:
    """The chance a spot node is interrupted within `seconds` (Poisson at the scaled band rate)."""
    rate = monthly_rate(bucket) / MONTH_SECONDS * max(0.0, scale)
    return 1.0 - math.exp(-rate * max(0.0, seconds))


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_reclaim_notice(
    *, backend: DeliveryBackend, node: dict, now: datetime | None = None
) -> list[str]:
    """Give a spot node its two-minute notice: Event, annotation, taint, evictions; audited."""
    now = now or timezone.now()
    at = now + timedelta(seconds=settings.KILN_SIM_SPOT_NOTICE_SECONDS)
    name = name_of(node)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.spot-interrupted", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name},
        "reason": "SpotInterrupted",
        "message": NOTICE_MESSAGE,
        "type": "Warning",
        "source": {"component": "karpenter"},
        "firstTimestamp": _iso(now),
        "lastTimestamp": _iso(now),
    }
    labels = labels_of(node)
    with transaction.atomic():
        backend.apply(
            [event, node_with(node, annotations={A_RECLAIM_AT: _iso(at)})],
            field_manager="karpenter",
        )
        live = backend.get("v1", "Node", None, name) or node
        on_node = {f"{_ns(p)}/{name_of(p)}": p for p in pod_list(backend, node=name)}
        evicted = node_drain(backend=backend, node=live, reason="SpotInterrupted", delete=False)
        # Which workload each evicted pod belongs to: its replacement is that workload's.
        moved = [_moved(key, on_node.get(key)) for key in evicted]
        audit.record(
            system_actor(ACTOR),
            "scheduler.node.reclaim_noticed",
            f"scheduler:node:{name}",
            {
                "nodepool": labels.get(L_NODEPOOL, ""),
                "environment": labels.get(L_ENVIRONMENT, ""),
                "instance_type": labels.get(L_INSTANCE_TYPE, ""),
                "zone": labels.get(L_ZONE, ""),
                "reclaim_at": _iso(at),
                "evicted": evicted,
                "moved": moved,
            },
        )
        transaction.on_commit(lambda: _count_reclaimed(moved))
    return evicted


def _count_reclaimed(moved: list[dict[str, str]]) -> None:
    for pod in moved:
        SPOT_RECLAIMED_PODS.labels(pod["workload_class"] or "unknown").inc()


def _ns(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("namespace", "")


def _moved(key: str, pod: dict | None) -> dict[str, str]:
    """An evicted pod as the reclaim's record keeps it: the pod, its controller and its class."""
    kind, owner = pod_owner(pod) if pod is not None else ("", "")
    return {
        "pod": key,
        "owner_kind": kind,
        "owner": owner,
        "workload_class": scoring.workload_class_of(labels_of(pod)) if pod is not None else "",
    }


def spot_reclaims(
    *,
    backend: DeliveryBackend,
    seconds: float,
    rng: random.Random | None = None,
    now: datetime | None = None,
) -> dict[str, list[str]]:
    """One reclaim round over `seconds` of cluster time: notices drawn at the rates, due nodes removed."""
    rng = rng or random.Random()
    now = now or timezone.now()
    _, spot = selectors.price_book()
    scale = float(settings.KILN_SIM_SPOT_RECLAIM_SCALE)
    noticed, reclaimed = [], []
    for node in node_list(backend, capacity_type=SPOT):
        annotations = annotations_of(node)
        due = parse_datetime(annotations.get(A_RECLAIM_AT) or "")
        if due is not None:
            if now >= due:
                with transaction.atomic():
                    backend.delete(AppliedRef("v1", "Node", "", name_of(node)))
                    audit.record(
                        system_actor(ACTOR),
                        "scheduler.node.reclaimed",
                        f"scheduler:node:{name_of(node)}",
                        {
                            "nodepool": labels_of(node).get(L_NODEPOOL, ""),
                            "environment": labels_of(node).get(L_ENVIRONMENT, ""),
                        },
                    )
                reclaimed.append(name_of(node))
            continue
        labels = labels_of(node)
        quote = spot.get((labels.get(L_INSTANCE_TYPE, ""), labels.get(L_ZONE, "")))
        if rng.random() < reclaim_probability(quote[1] if quote else None, seconds, scale):
            node_reclaim_notice(backend=backend, node=node, now=now)
            noticed.append(name_of(node))
    return {"noticed": noticed, "reclaimed": reclaimed}
