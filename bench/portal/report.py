"""The provisioning benchmark's figures: request-to-READY percentiles, lost and duplicated
environments, CPU per environment and the report the command prints."""

from __future__ import annotations

import os
import statistics
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from audit.models import ChainEvent, OutboxEvent
from bench.portal.harness import Observed
from portal.models import Environment

TARGET_P95_OVERHEAD_SECONDS = 1.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def readied_counts(public_ids: list[str]) -> Counter:
    """How many `portal.environment.readied` events each environment has, counted by event id:
    while the relay hands an event over, it can be both in the outbox and (by the writer)
    already in the chain."""
    targets = [f"portal.environment:{i}" for i in public_ids]
    readied_events = set(
        OutboxEvent.objects.filter(
            target__in=targets, action="portal.environment.readied"
        ).values_list("target", "event_id")
    ) | set(
        ChainEvent.objects.filter(
            target__in=targets, action="portal.environment.readied"
        ).values_list("target", "event_id")
    )
    return Counter(target for target, _ in readied_events)


def profile_result(observed: Observed, *, requests: int) -> dict[str, Any]:
    """One profile's figures from the environments its measured requests created."""
    ids = list(observed.submitted)
    envs = list(Environment.objects.filter(public_id__in=ids))
    latencies = [
        (
            e.ready_at - datetime.fromtimestamp(observed.submitted[e.public_id], tz=UTC)
        ).total_seconds()
        for e in envs
        if e.status == "READY" and e.ready_at
    ]
    created = Environment.objects.filter(name__startswith=f"{observed.run}-").count() - len(
        observed.warmed
    )
    readied = readied_counts(ids)
    duplicated = max(0, created - requests) + sum(max(0, c - 1) for c in readied.values())
    failed = sum(1 for e in envs if e.status in ("FAILED", "DENIED"))
    api_ms = observed.api_ms
    return {
        "ready": len(latencies),
        "failed": failed,
        "lost": requests - len(latencies) - failed,
        "duplicated": duplicated,
        "errors": dict(observed.errors),
        "p50_seconds": round(statistics.median(latencies), 3) if latencies else None,
        "p95_seconds": round(percentile(latencies, 95), 3) if latencies else None,
        "max_seconds": round(max(latencies), 3) if latencies else None,
        "api_create_p50_ms": round(statistics.median(api_ms), 1) if api_ms else None,
        "wall_seconds": round(observed.wall, 2),
    }


def cpu_ms_per_environment(
    *, before: dict[str, float], after: dict[str, float], sent: int
) -> dict[str, float]:
    """CPU milliseconds per environment sent, of each process the bench measured (this one; the
    web's, when it runs apart; the prefork worker's and the audit writer's, when they do)."""
    return {name: round((after[name] - before[name]) * 1000 / sent, 1) for name in before}


def load_around(before: tuple[float, ...], after: tuple[float, ...]) -> dict[str, list[float]]:
    """The load averages (1, 5, 15 minutes) before and after a profile."""
    return {"before": [round(x, 2) for x in before], "after": [round(x, 2) for x in after]}


def bench_report(
    *,
    opts: dict[str, Any],
    broker: str,
    loads: dict[str, Any],
    backlog: dict[str, Any],
    results: dict[str, Any],
) -> dict[str, Any]:
    """The JSON the command prints: the run's shape, the machine's load and each profile."""
    report: dict[str, Any] = {
        "requests": opts["requests"],
        "concurrency": opts["concurrency"],
        "arrival": opts["arrival"],
        "warmup_requests": opts["warmup"],
        "api": opts["api"],
        "worker": opts["worker"],
        "workers": opts["workers"],
        "database": connection.vendor,
        "broker": broker.split("://")[0],
        "cpus": os.cpu_count(),
        "load_average": loads,
        "earlier_work_before_start": backlog,
        "profiles": results,
        "target": {"p95_overhead_seconds": TARGET_P95_OVERHEAD_SECONDS},
    }
    if "zero" in results:
        report["target"]["met"] = results["zero"]["p95_seconds"] <= TARGET_P95_OVERHEAD_SECONDS
    return report
