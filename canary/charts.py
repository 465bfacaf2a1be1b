"""The rollout dashboard's four charts, defined once, and each one's data table.

The page renders every chart's series as a <table> (the accessible alternative to the
drawing, WCAG 1.1.1); static/canary/rollout.js reads the series (tick field, label,
scale, decimals) from that table's header, draws them and keeps the table's rows in step
as ticks arrive, formatting a value as `cell` does here. No Django: rows from tick points
(`canary.selectors.rollout_ticks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NO_EVIDENCE = "—"  # a window without traffic or metrics has no statistic


@dataclass(frozen=True)
class Series:
    """One line of a chart: a tick point's field, shown times `scale` to `decimals` places."""

    key: str
    label: str
    decimals: int
    scale: int = 1


@dataclass(frozen=True)
class Chart:
    """A chart of tick points over the tick number."""

    id: str
    title: str
    series: tuple[Series, ...]


CHARTS = (
    Chart("weight", "Traffic to the canary (%)", (Series("weight", "canary %", 0),)),
    Chart(
        "errors",
        "Error rate by arm (%)",
        (
            Series("baseline_error_rate", "baseline", 3, scale=100),
            Series("canary_error_rate", "canary", 3, scale=100),
        ),
    ),
    Chart(
        "sprt",
        "SPRT log-likelihood ratio (errors) and its bounds",
        (
            Series("llr", "LLR", 2),
            Series("llr_upper", "roll back at", 2),
            Series("llr_lower", "accept at", 2),
        ),
    ),
    Chart(
        "cusum",
        "CUSUM (latency) and its threshold",
        (Series("cusum", "CUSUM", 2), Series("cusum_threshold", "threshold", 2)),
    ),
)


def cell(value: float | None, series: Series) -> str:
    """A value as its table shows it: `NO_EVIDENCE` for null, else scaled, fixed decimals.

    The same as rollout.js's `cell` (JavaScript's toFixed), so a live row equals a served one.
    """
    if value is None:
        return NO_EVIDENCE
    # + 0.0 turns -0.0 into 0.0: toFixed writes negative zero as "0.00", Python as "-0.00".
    return f"{value * series.scale + 0.0:.{series.decimals}f}"


def chart_tables(ticks: list[dict[str, Any]], weight: int | None = None) -> list[dict[str, Any]]:
    """Every chart with its table's rows: the tick number and each series' cell, by tick.

    The traffic the rollout moved to after its last analysed tick (`weight`, when it differs
    from that tick's) is one more row, "now", in a chart that draws the weight: the same point
    rollout.js draws, so the table reads as the chart does.
    """
    last = ticks[-1] if ticks else None
    moved = last is not None and weight is not None and last.get("weight") != weight
    tables = []
    for chart in CHARTS:
        rows = [
            {"tick": t["tick"], "cells": [cell(t[s.key], s) for s in chart.series]} for t in ticks
        ]
        if moved and any(s.key == "weight" for s in chart.series):
            now = [cell(weight if s.key == "weight" else None, s) for s in chart.series]
            rows.append({"tick": "now", "cells": now})
        tables.append({"chart": chart, "rows": rows})
    return tables
