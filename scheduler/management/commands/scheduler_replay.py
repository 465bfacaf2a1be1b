"""Replay the Google 2011 trace against kiln and the default kube-scheduler model; print JSON."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kiln import benchjson
from kiln.identity.permissions import system_actor
from scheduler import selectors, services
from scheduler.replay import ReplayConfig, load_trace, parse_parts, run_many
from scheduler.replay.cluster import SCHEDULERS
from scheduler.replay.sim import STARTS, WINDOW_START_US
from scheduler.replay.trace import SCHEDULE, TraceError


def _fractions(spec: str) -> list[float]:
    try:
        values = [float(v) for v in spec.split(",") if v.strip()]
    except ValueError as exc:
        raise CommandError(f"--spot-fractions must be numbers like 0.1,0.5: {exc}") from exc
    if not values or any(not 0.0 <= v <= 1.0 for v in values):
        raise CommandError("--spot-fractions must be numbers within [0, 1]")
    return values


def _choices(spec: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    values = [v.strip() for v in spec.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if not values or bad:
        raise CommandError(f"{flag} takes a comma list of {', '.join(allowed)}; got {spec!r}")
    return values


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # measuring/serving commands need no URL checks
    help = "Replay task_events parts of the Google 2011 trace under kiln and default; print JSON."

    def add_arguments(self, parser):
        default_trace = Path(settings.BASE_DIR).parent / "shared" / "data" / "google-2011"
        parser.add_argument(
            "--trace", default=str(default_trace), help="folder holding the trace tables"
        )
        parser.add_argument("--parts", default="0-13", help="task_events parts, e.g. 0-13 or 0,1")
        parser.add_argument("--spot-fractions", default="0.1,0.3,0.5,0.7,0.9")
        parser.add_argument("--start", default="trace", help="trace, empty or trace,empty")
        parser.add_argument("--schedulers", default="kiln,default")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--max-rows", type=int, default=None, help="read at most this many task rows"
        )
        parser.add_argument(
            "--json", dest="json_out", default=None, help="also write the JSON here"
        )
        parser.add_argument(
            "--store", action="store_true", help="store the report for the results page"
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="runs in parallel processes sharing the parsed trace (one per core)",
        )

    def handle(self, *args, **opts):
        started_at = benchjson.now()
        try:
            parts = parse_parts(opts["parts"])
        except TraceError as exc:
            raise CommandError(str(exc)) from exc
        fractions = _fractions(opts["spot_fractions"])
        starts = _choices(opts["start"].replace("|", ","), STARTS, "--start")
        schedulers = _choices(opts["schedulers"], SCHEDULERS, "--schedulers")

        def progress(message: str) -> None:
            print(message, file=sys.stderr, flush=True)

        try:
            trace = load_trace(opts["trace"], parts, max_rows=opts["max_rows"], progress=progress)
        except TraceError as exc:
            raise CommandError(str(exc)) from exc
        tasks = trace.tasks
        schedule = tasks.kind == SCHEDULE
        progress(
            f"parsed {trace.rows_read} rows ({len(tasks)} kept) in {trace.parse_seconds:.1f}s; "
            f"{int(schedule.sum())} SCHEDULE events"
        )
        weights = selectors.scoring_weights()
        configs = [
            ReplayConfig(scheduler, fraction, start, seed=opts["seed"], weights=weights)
            for start in starts
            for fraction in fractions
            for scheduler in schedulers
        ]
        if opts["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        started = time.perf_counter()
        runs = []
        for result in run_many(trace, configs, opts["workers"], progress):
            data = result.as_dict()
            data["replay_to_parse_ratio"] = round(result.wall_seconds / trace.parse_seconds, 3)
            runs.append(data)
            committed = result.commitment.get("summary", {})
            progress(
                f"done {result.scheduler} spot={result.spot_fraction} start={result.start}: "
                f"{result.placements} placements in {result.wall_seconds:.1f}s, "
                f"latency on spot {result.latency_on_spot}, cost {result.cost:.0f}, "
                f"commitment cpu {_mean(committed, 'cpu')} memory {_mean(committed, 'memory')}"
            )
        report = {
            "trace": str(opts["trace"]),
            "parts": opts["parts"],
            "seed": opts["seed"],
            "nodes": int(len(np.unique(trace.machines.machine))),
            "nodes_at_start": int(((trace.machines.time == 0) & (trace.machines.kind == 0)).sum()),
            "task_rows": trace.rows_read,
            "placements": int(schedule.sum()),
            "latency_class_placements": int((schedule & (tasks.priority >= 9)).sum()),
            "placements_at_time_zero": int((schedule & (tasks.time == 0)).sum()),
            "trace_hours": round(
                max(0, int(tasks.time.max(initial=0)) - WINDOW_START_US) / 3.6e9, 3
            ),
            "parse_seconds": round(trace.parse_seconds, 3),
            "weights": {"cost": weights.cost, "packing": weights.packing, "risk": weights.risk},
            "total_wall_seconds": round(time.perf_counter() - started, 3),
            "workers": opts["workers"],
            "savings_kiln_vs_default": _savings(runs),
            "commitment": _commitment(runs),
            "runs": runs,
        }
        printed = benchjson.stamped(report, name="scheduler_replay", date=started_at)
        text = json.dumps(printed, indent=2)
        if opts["json_out"]:
            Path(opts["json_out"]).write_text(text + "\n")
        if opts["store"]:
            services.replay_report_store(actor=system_actor("scheduler-replay"), report=report)
        self.stdout.write(text)


def _savings(runs: list[dict]) -> list[dict]:
    """Per start and spot fraction: kiln's cost saving over default (fraction of default's cost)."""
    by_key = {(r["scheduler"], r["start"], r["spot_fraction"]): r for r in runs}
    out = []
    for (scheduler, start, fraction), run in sorted(by_key.items()):
        other = by_key.get(("default", start, fraction))
        if scheduler != "kiln" or other is None or not other["cost"]:
            continue
        out.append(
            {
                "start": start,
                "spot_fraction": fraction,
                "kiln_cost": run["cost"],
                "default_cost": other["cost"],
                "savings": round(1 - run["cost"] / other["cost"], 4),
            }
        )
    return out


def _mean(summary: dict, resource: str) -> str:
    figure = summary.get(resource)
    return "n/a" if figure is None else f"{figure['mean']:.3f}"


def _commitment(runs: list[dict]) -> list[dict]:
    """Per run, Workload Commitment over trace time in one line: mean ratio and pending share."""
    out = []
    for run in runs:
        summary = run.get("commitment", {}).get("summary", {})
        out.append(
            {
                "scheduler": run["scheduler"],
                "start": run["start"],
                "spot_fraction": run["spot_fraction"],
                **{
                    key: summary[key]["mean"]
                    for key in ("cpu", "memory", "cpu_pending", "memory_pending", "memory_stranded")
                    if key in summary
                },
            }
        )
    return out
