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
from scheduler.replay import ReplayConfig, load_trace, parse_parts, reclaim, run_many
from scheduler.replay.cluster import DEFAULT, KILN, KILN_NO_SPREAD, SCHEDULERS
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
            "--json",
            dest="json_out",
            nargs="?",
            const="",
            default=None,
            help="also write the JSON here (alone: print it only)",
        )
        parser.add_argument(
            "--store", action="store_true", help="store the report for the results page"
        )
        parser.add_argument(
            "--reclaim-study",
            action="store_true",
            help="reclaim each spot capacity pool in turn: choose k on --choose-parts, then run "
            "kiln, default and kiln-no-spread on --parts",
        )
        parser.add_argument(
            "--choose-parts", default="0-6", help="task_events parts the study chooses k on"
        )
        parser.add_argument(
            "--spread-k", default="2", help="k of the spread filter; the study tries each listed"
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="runs in parallel processes sharing the parsed trace (one per core)",
        )

    def handle(self, *args, **opts):
        if opts["reclaim_study"]:
            return self._study(opts)
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
        k = _ks(opts["spread_k"])[0]
        configs = [
            ReplayConfig(scheduler, fraction, start, seed=opts["seed"], weights=weights, spread_k=k)
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

    def _study(self, opts) -> None:
        """The reclaim study: k chosen on some parts, the three schedulers reported on others."""
        started_at = benchjson.now()
        try:
            choose_parts = parse_parts(opts["choose_parts"])
            report_parts = parse_parts(opts["parts"])
        except TraceError as exc:
            raise CommandError(str(exc)) from exc
        if set(choose_parts) & set(report_parts):
            raise CommandError("--choose-parts and --parts must not share a part")
        ks = _ks(opts["spread_k"])
        fraction = _fractions(opts["spot_fractions"])[0]
        start = _choices(opts["start"], STARTS, "--start")[0]
        weights = selectors.scoring_weights()

        def progress(message: str) -> None:
            print(message, file=sys.stderr, flush=True)

        def runs(parts, configs):
            try:
                trace = load_trace(opts["trace"], parts, progress=progress)
            except TraceError as exc:
                raise CommandError(str(exc)) from exc
            out = []
            for result in run_many(trace, configs, opts["workers"], progress):
                out.append(reclaim.study_figures(result.as_dict()))
                progress(f"done {result.scheduler} k={result.spread_k}: {out[-1]}")
            return out

        def config(scheduler: str, k: int) -> ReplayConfig:
            return ReplayConfig(
                scheduler, fraction, start, seed=opts["seed"], weights=weights, spread_k=k
            )

        chosen = runs(choose_parts, [config(KILN_NO_SPREAD, ks[0])] + [config(KILN, k) for k in ks])
        baseline, tried = chosen[0], dict(zip(ks, chosen[1:], strict=True))
        k, rule = reclaim.choose_k(tried, baseline)
        reported = runs(
            report_parts, [config(KILN, k), config(DEFAULT, k), config(KILN_NO_SPREAD, k)]
        )
        by_name = dict(zip((KILN, DEFAULT, KILN_NO_SPREAD), reported, strict=True))
        today = by_name[KILN_NO_SPREAD]
        report = {
            "trace": str(opts["trace"]),
            "seed": opts["seed"],
            "spot_fraction": fraction,
            "start": start,
            "choose_parts": opts["choose_parts"],
            "report_parts": opts["parts"],
            "k_candidates": ks,
            "chosen_k": k,
            "choice_rule": rule,
            "choice": {
                "baseline_kiln_no_spread": baseline,
                "kiln_by_k": {str(kk): figures for kk, figures in tried.items()},
            },
            "schedulers": by_name,
            "targets": {
                "kiln_zero_wiped_out": by_name[KILN]["workloads_wiped_out"] == 0,
                "kiln_within_5pct_of_today": reclaim.within(by_name[KILN], today),
                "placements_ratio_kiln_to_today": _ratio(by_name[KILN], today, "placements"),
                "spot_placements_ratio_kiln_to_today": _ratio(
                    by_name[KILN], today, "spot_placements"
                ),
            },
        }
        printed = benchjson.stamped(report, name="scheduler_replay", date=started_at)
        text = json.dumps(printed, indent=2)
        if opts["json_out"]:
            Path(opts["json_out"]).write_text(text + "\n")
        self.stdout.write(text)


def _ratio(run: dict, base: dict, key: str) -> float | None:
    return round(run[key] / base[key], 4) if base[key] else None


def _ks(spec: str) -> list[int]:
    """k values of the spread filter: whole numbers >= 1 (a k of 0 is refused, naming it)."""
    try:
        values = [int(v) for v in spec.split(",") if v.strip()]
    except ValueError as exc:
        raise CommandError(f"--spread-k must be whole numbers like 2,3: {exc}") from exc
    if not values or any(v < 1 for v in values):
        raise CommandError(f"--spread-k must be whole numbers >= 1, got {spec!r}")
    return values


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
