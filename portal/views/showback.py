"""Showback: spend per team over a chosen period, a chart of spend by day, and a CSV export.
The export answers to the same viewer as the page: only the teams and environments it shows."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, time
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render

from kiln.identity.permissions import actor_from_request
from portal import budget_reads, selectors

CSV_HEADER = [
    "team",
    "environment",
    "class",
    "status",
    "hours",
    "hourly_usd",
    "spend_usd",
    "node_hours_ran",
    "spend_from_what_ran_usd",
    "hours_asleep",
    "asleep_hourly_usd",
]


def _period(request: HttpRequest) -> str | None:
    period = request.GET.get("period") or selectors.DEFAULT_SHOWBACK_PERIOD
    return period if period in selectors.SHOWBACK_PERIODS else None


def _bad_period(request: HttpRequest, *, page: bool) -> HttpResponse:
    """A period that is not one of the choices: the page's error card, or plain text for a CSV."""
    choices = ", ".join(selectors.SHOWBACK_PERIODS)
    said = f"period must be one of {choices}"
    if not page:
        return HttpResponseBadRequest(said, content_type="text/plain")
    context = {"status": 400, "title": "No such period", "message": f"The showback {said}."}
    return render(request, "kiln/error.html", context, status=400)


def _report(request: HttpRequest, period: str) -> dict[str, Any]:
    actor = actor_from_request(request)
    days = selectors.SHOWBACK_PERIODS[period]
    team = request.GET.get("team") or None
    series = selectors.spend_by_day(viewer=actor, days=days, team=team)
    # The period is the chart's days: from the start of its first (UTC) day until now.
    since = datetime.combine(series[0]["day"], time.min, UTC)
    rows = selectors.team_showback(viewer=actor, team=team, since=since)
    return {
        "rows": rows,
        "series": series,
        # The chart's bars have no axis of their own: its first and last day, its highest day.
        "spend_axis": {
            "first": series[0]["day"],
            "last": series[-1]["day"],
            "peak": max(d["spend"] for d in series),
            # The teams' totals below it (each day's bar is rounded on its own).
            "total": sum(r["total"] for r in rows),
        }
        if series
        else None,
        "period": period,
        "periods": list(selectors.SHOWBACK_PERIODS),
        "team": team or "",
    }


@login_required
def showback(request: HttpRequest) -> HttpResponse:
    """Spend per team over the period, by environment and class, beside what ran; and for each
    team with a budget, its month: spend, forecast and budget on one chart."""
    period = _period(request)
    if period is None:
        return _bad_period(request, page=True)
    context = _report(request, period)
    context["budgets"] = budget_reads.showback_budgets(
        viewer=actor_from_request(request), team=context["team"] or None
    )
    return render(request, "portal/showback.html", context)


@login_required
def showback_csv(request: HttpRequest) -> HttpResponse:
    """The page's table as CSV: one line per environment, and one per team with nothing up."""
    period = _period(request)
    if period is None:
        return _bad_period(request, page=False)
    report = _report(request, period)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="showback-{period}.csv"'
    writer = csv.writer(response)
    writer.writerow(CSV_HEADER)
    for row in report["rows"]:
        if not row["environments"]:
            writer.writerow(
                [row["team"], "", "", "", "0.00", "", "0.00", "0.00", "0.00", "0.00", ""]
            )
        for e in row["environments"]:
            env, ran = e["environment"], e["ran"]
            writer.writerow(
                [
                    row["team"],
                    env.namespace,
                    env.env_class,
                    env.status,
                    e["hours"],
                    e["hourly"],
                    e["spend"],
                    f"{ran.node_hours:.2f}",
                    ran.cost,
                    e["asleep_hours"],
                    e["asleep_hourly"],
                ]
            )
    return response
