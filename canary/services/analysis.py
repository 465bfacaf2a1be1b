"""What an analysis tick reads and concludes before it takes the rollout's row lock.

The metrics (Prometheus over HTTP, the simulated cluster's routes), the evidence, the
sequential analysis's decision and, when the decision would move traffic, the
namespace's owner (a cluster read): all without a lock, so a slow metrics server or
cluster never holds the rollout's row (`rollouts.rollout_tick` records the plan under it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from canary.metrics import read_windows
from canary.models import MetricsSource, Rollout
from canary.sequential import CONTINUE, PROMOTE, Analyzer, Decision, Evidence
from canary.sequential import evidence as tick_evidence
from canary.services.config import analysis_config, analysis_steps
from canary.services.machine import ownership_refusal_of
from canary.traffic import weight_at
from kiln.errors import Unavailable


@dataclass
class TickPlan:
    """What a tick read and concluded before taking the rollout's lock."""

    refusal: str | None = None  # why the namespace may no longer be routed (read when it matters)
    evidence: Evidence | None = None  # None: pushed metrics, read under the lock
    weight: int = 0
    decision: Decision | None = None


def tick_plan(rollout: Rollout, tick: int) -> TickPlan:
    """Read the tick's metrics and decide it, holding no lock; pushed metrics wait for the lock."""
    if tick == 0:
        return TickPlan(refusal=ownership_refusal_of(rollout))
    if rollout.service.metrics_source == MetricsSource.PUSH:
        # Consumed under the lock (a database read); the owner is read now, in case it steps.
        return TickPlan(refusal=ownership_refusal_of(rollout))
    ev, weight = tick_read(rollout, tick)
    decision = tick_decide(rollout, ev)
    plan = TickPlan(evidence=ev, weight=weight, decision=decision)
    if moves_traffic(rollout, decision):
        plan.refusal = ownership_refusal_of(rollout)
    return plan


def tick_read(rollout: Rollout, tick: int) -> tuple[Evidence, int]:
    """The tick's evidence and the canary weight it was served at."""
    try:
        baseline, canary, weight = read_windows(rollout, tick)
        return tick_evidence(baseline, canary, analysis_config(rollout)), weight
    except Unavailable as exc:
        # A metrics error is no evidence: the tick is recorded as such and the clock runs on.
        return Evidence.none(f"metrics unavailable: {exc.message}"), rollout.weight


def tick_decide(rollout: Rollout, ev: Evidence) -> Decision:
    """The sequential analysis of the rollout's evidence so far, and this tick's."""
    analyzer = Analyzer(analysis_config(rollout))
    history = [
        Evidence.from_dict(e)
        for e in rollout.ticks.filter(number__gt=rollout.analysis_start)
        .order_by("number")
        .values_list("evidence", flat=True)
    ]
    analyzer.replay(history)
    return analyzer.observe(ev)


def moves_traffic(rollout: Rollout, decision: Decision) -> bool:
    """Whether carrying out `decision` would route traffic anew (a promotion or a step)."""
    if decision.action == PROMOTE:
        return True
    tick = rollout.ticks_done + 1 - rollout.analysis_start
    return decision.action == CONTINUE and (
        weight_at(analysis_steps(rollout), tick) != rollout.weight
    )


def stat_summary(stats: dict[str, Any]) -> dict[str, Any]:
    """What decisions, audit events and the API carry: bounds, CUSUM, sample sizes."""
    keys = (
        "tick",
        "llr",
        "llr_lower",
        "llr_upper",
        "cusum",
        "cusum_threshold",
        "cusum_median",
        "cusum_tail",
        "errors_accepted",
        "channels",
        "requests_needed",
        "minutes_needed",
        "empty_ticks",
        "max_ticks",
        "settle",
    )
    return {k: stats.get(k) for k in keys}
