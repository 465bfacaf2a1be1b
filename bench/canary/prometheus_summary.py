"""canary_prometheus_bench's figures from its rollouts: per class the rates the targets are about,
and pooled over every class the counts behind them with one-sided 95% Clopper-Pearson upper
bounds. Pure: it reads `prometheus_bench.Rollout`s (their judges' decisions) and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from bench.canary.streams import MAX_TICKS
from canary.sequential import PROMOTE, ROLLBACK

if TYPE_CHECKING:
    from bench.canary.prometheus_bench import Rollout

KINDS = ("classic", "native")


def _rate(values: list[bool]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def upper_bound_95(events: int, trials: int) -> float | None:
    """The one-sided 95% Clopper-Pearson upper bound of a rate seen `events` times in `trials`.

    Zero events in n trials bounds the rate by about 3/n (the rule of three)."""
    if trials == 0:
        return None
    if events >= trials:
        return 1.0
    lo, hi = events / trials, 1.0
    for _ in range(60):  # bisection on the binomial tail P(X <= events | p) = 0.05
        mid = (lo + hi) / 2
        if _binomial_cdf(events, trials, mid) > 0.05:
            lo = mid
        else:
            hi = mid
    return round(hi, 4)


def _binomial_cdf(k: int, n: int, p: float) -> float:
    term, total = (1.0 - p) ** n, 0.0
    for i in range(k + 1):
        total += term
        term *= (n - i) / (i + 1) * p / (1.0 - p) if i < n else 0.0
    return total


def _by_health(rows: list[Rollout]) -> tuple[list[Rollout], list[Rollout]]:
    """(healthy rollouts, regressed rollouts), each in the order given."""
    healthy = [r for r in rows if r.regression is None]
    return healthy, [r for r in rows if r.regression is not None]


def pooled(rows: list[Rollout]) -> dict:
    """Per judge over every class: the counts behind the rates and their 95% upper bounds."""
    healthy, regressed = _by_health(rows)
    out = {}
    for judge in ("exact", *KINDS):
        false_rb = sum(r.decided.get(judge, ("",))[0] == ROLLBACK for r in healthy)
        promoted = sum(r.decided.get(judge, ("",))[0] == PROMOTE for r in regressed)
        out[judge] = {
            "healthy": len(healthy),
            "false_rollbacks": false_rb,
            "false_rollback_upper_95": upper_bound_95(false_rb, len(healthy)),
            "regressed": len(regressed),
            "regressions_promoted": promoted,
            "regression_promoted_upper_95": upper_bound_95(promoted, len(regressed)),
        }
        if judge in KINDS:
            out[judge]["agrees_with_exact"] = sum(
                r.decided.get(judge) == r.decided.get("exact") for r in rows
            )
            out[judge]["rollouts"] = len(rows)
    return out


def summarise(rows: list[Rollout]) -> dict:
    """Per judge: the fractions the targets are about, minutes to decide, and the resolution."""
    healthy, regressed = _by_health(rows)
    out = {}
    for judge in ("exact", *KINDS):

        def action(r: Rollout, judge: str = judge) -> str:
            return r.decided.get(judge, ("undecided", MAX_TICKS))[0]

        ticks = [r.decided[judge][1] for r in rows if judge in r.decided]
        row = {
            "false_rollback": _rate([action(r) == ROLLBACK for r in healthy]),
            "regression_promoted": _rate([action(r) == PROMOTE for r in regressed]),
            "inconclusive": _rate([action(r) in ("inconclusive", "undecided") for r in rows]),
            "healthy_promoted": _rate([action(r) == PROMOTE for r in healthy]),
            "regression_rolled_back": _rate([action(r) == ROLLBACK for r in regressed]),
            "median_minutes_to_decide": float(np.median(ticks)) if ticks else None,
        }
        if judge in KINDS:
            # Agreement: the share of rollouts this kind decided exactly as the exact counts
            # did (the same action at the same tick). Where it is 1.0 the kind inherits the
            # exact judge's error rates, which canary_bench measures on many more rollouts.
            row["agrees_with_exact"] = _rate(
                [r.decided.get(judge) == r.decided.get("exact") for r in rows]
            )
            # Resolved: no rollout of the class had a latency channel its buckets could not
            # resolve at the design shifts.
            row["resolved"] = not any(r.unresolved.get(judge) for r in rows)
            served = sum(r.served for r in rows)
            row["requests_counted_share"] = (
                round(sum(r.counted.get(judge, 0.0) for r in rows) / served, 4) if served else None
            )
        out[judge] = row
    out["rollouts"] = {"healthy": len(healthy), "regressed": len(regressed)}
    return out
