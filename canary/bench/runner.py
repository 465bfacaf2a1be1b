"""Run the judges over every class, tune on one seed set, report on another."""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict

import numpy as np

from canary.bench.judges import (
    KayentaConfig,
    Outcome,
    ThresholdConfig,
    judge_kayenta,
    judge_kiln,
    judge_threshold,
)
from canary.bench.streams import (
    BENCH_STEPS,
    HORIZON,
    MAX_TICKS,
    SAMPLE_CAP,
    SEED_SETS,
    TAIL_QUANTILE,
    BenchClass,
    Streams,
    bench_classes,
    concat,
    simulate,
)
from canary.sequential import CHANNELS, AnalysisConfig
from canary.simulated_traffic import REGRESSIONS, Simulator

TARGETS = {
    "false_rollback_rate": 0.01,
    "regressions_promoted_rate": 0.05,
    "healthy_promoted_rate": 0.9,
}
KILN_GRID = {
    "alpha": (0.001, 0.003),
    "beta": (0.02, 0.05),
    "cusum_threshold": (9.0, 11.0),
    "dispersion_ticks": (4.0, 8.0),
}
THRESHOLD_GRID = {
    "error_factor": (1.5, 2.0, 3.0),
    "median_factor": (1.1, 1.2, 1.3),
    "p99_factor": (1.5, 2.0, 3.0),
    "failure_limit": (2, 4, 8),
}
KAYENTA_GRID = {
    "confidence": (0.95, 0.99),
    "error_tolerance": (0.25, 0.5, 1.0),
    "latency_tolerance": (0.05, 0.1, 0.2),
}


def kiln_config(**overrides) -> AnalysisConfig:
    """The engine as a rollout of the benchmark's steps runs it (defaults, plus `overrides`)."""
    return AnalysisConfig(horizon_ticks=HORIZON, max_ticks=MAX_TICKS, **overrides)


def class_streams(
    bench: BenchClass, *, rollouts: int, seed: int, watch: list[AnalysisConfig] = ()
) -> tuple[Streams, Streams]:
    """`rollouts` healthy rollouts and `rollouts` regressed ones (split over the class's regressions)."""
    clean = simulate(bench, rollouts=rollouts, seed=seed, regression=None, watch=watch)
    kinds = bench.regressions
    share = [
        rollouts // len(kinds) + (1 if i < rollouts % len(kinds) else 0) for i in range(len(kinds))
    ]
    parts = [
        simulate(
            bench,
            rollouts=n,
            seed=seed + 1000 + REGRESSIONS.index(kind),
            regression=kind,
            watch=watch,
        )
        for kind, n in zip(kinds, share, strict=True)
        if n
    ]
    return clean, concat(parts)


def _rate(mask: np.ndarray) -> float:
    return round(float(np.mean(mask)), 4) if mask.size else 0.0


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None


def summarise(clean: Outcome, regressed: Outcome, kinds: np.ndarray, with_needs: bool) -> dict:
    """Per judge and class: the rates the targets are about, and minutes to a decision."""
    out = {
        "false_rollback_rate": _rate(clean.action == 2),
        "healthy_promoted_rate": _rate(clean.action == 1),
        "healthy_inconclusive_rate": _rate(clean.action == 3),
        "regressions_promoted_rate": _rate(regressed.action == 1),
        "regressions_rolled_back_rate": _rate(regressed.action == 2),
        "regressions_inconclusive_rate": _rate(regressed.action == 3),
        "regressions_promoted_by_kind": {
            REGRESSIONS[k]: _rate(regressed.action[kinds == k] == 1) for k in np.unique(kinds)
        },
        "median_minutes_to_decision_healthy": _median(clean.tick[clean.action != 0]),
        "median_minutes_to_promotion": _median(clean.tick[clean.action == 1]),
        "median_minutes_to_rollback_regressed": _median(regressed.tick[regressed.action == 2]),
    }
    held = clean.action == 3
    if with_needs and held.any():
        needed = clean.requests_needed[held]
        finite = np.isfinite(needed)
        total = clean.requests_seen[held][finite] + needed[finite]
        channels = np.bincount(clean.channel[held], minlength=3)
        out["inconclusive_healthy"] = {
            "median_canary_requests_still_needed": _median(np.round(needed[finite])),
            "canary_rps_that_would_decide_within_max_duration": _median(total / (MAX_TICKS * 60))
            if total.size
            else None,
            "undecided_channel": CHANNELS[int(np.argmax(channels))],
        }
    return out


def _worst(results: dict[str, dict], judge: str) -> dict:
    rows = [r[judge] for r in results.values()]
    return {
        "worst_false_rollback_rate": max(r["false_rollback_rate"] for r in rows),
        "worst_regressions_promoted_rate": max(r["regressions_promoted_rate"] for r in rows),
        "lowest_healthy_promoted_rate": min(r["healthy_promoted_rate"] for r in rows),
    }


def _simulate_all(
    classes: dict[str, BenchClass], rollouts: int, base_seed: int, watch: list[AnalysisConfig]
) -> dict:
    return {
        name: class_streams(bench, rollouts=rollouts, seed=base_seed + 10_000 * i, watch=watch)
        for i, (name, bench) in enumerate(classes.items())
    }


def _nominal(bench: BenchClass) -> dict[str, float]:
    return Simulator(bench.traffic, rollouts=1).nominal()


def _grid(grid: dict[str, tuple]) -> list[dict]:
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def _score_safe(per_class: list[dict]) -> tuple:
    """Kiln's tuning score: feasibility on the targets first, then healthy promotions, then speed."""
    worst_fr = max(r["false_rollback_rate"] for r in per_class)
    worst_rp = max(r["regressions_promoted_rate"] for r in per_class)
    violation = max(0.0, worst_fr - 0.008) + max(0.0, worst_rp - 0.04)  # margin under the targets
    promoted = float(np.mean([r["healthy_promoted_rate"] for r in per_class]))
    minutes = float(np.mean([r["median_minutes_to_promotion"] or MAX_TICKS for r in per_class]))
    return (violation, -promoted, minutes)


def _score_best_case(per_class: list[dict]) -> tuple:
    """A baseline judge's best case: the worse of its worst false-rollback and miss rates."""
    worst = max(max(r["false_rollback_rate"], r["regressions_promoted_rate"]) for r in per_class)
    promoted = float(np.mean([r["healthy_promoted_rate"] for r in per_class]))
    return (worst, -promoted)


def tune(streams: dict, classes: dict[str, BenchClass]) -> dict:
    """Choose each judge's constants on the tuning streams; return the choices and their scores."""
    chosen = {}
    trials = []
    for params in _grid(KILN_GRID):
        cfg = kiln_config(**params)
        rows = [
            summarise(judge_kiln(c, cfg), judge_kiln(r, cfg), r.kind, False)
            for c, r in streams.values()
        ]
        trials.append((_score_safe(rows), params))
    score, params = min(trials, key=lambda t: t[0])
    chosen["kiln"] = {"params": params, "score": list(score), "grid": KILN_GRID}
    for name, grid, run, key in (
        ("threshold", THRESHOLD_GRID, _run_threshold, ThresholdConfig),
        ("kayenta", KAYENTA_GRID, _run_kayenta, KayentaConfig),
    ):
        trials = []
        for params in _grid(grid):
            cfg = key(**params)
            rows = [run(cfg, c, r, classes[cls]) for cls, (c, r) in streams.items()]
            trials.append((_score_best_case(rows), params))
        score, params = min(trials, key=lambda t: t[0])
        chosen[name] = {"params": params, "score": list(score), "grid": grid}
    return chosen


def _run_threshold(cfg: ThresholdConfig, clean: Streams, reg: Streams, bench: BenchClass) -> dict:
    nominal = _nominal(bench)
    return summarise(
        judge_threshold(clean, cfg, nominal), judge_threshold(reg, cfg, nominal), reg.kind, False
    )


def _run_kayenta(cfg: KayentaConfig, clean: Streams, reg: Streams, bench: BenchClass) -> dict:
    return summarise(judge_kayenta(clean, cfg), judge_kayenta(reg, cfg), reg.kind, False)


def report(streams: dict, classes: dict[str, BenchClass], chosen: dict) -> dict:
    """Every judge with its chosen constants on every class of the given streams."""
    kiln = kiln_config(**chosen["kiln"]["params"])
    threshold = ThresholdConfig(**chosen["threshold"]["params"])
    kayenta = KayentaConfig(**chosen["kayenta"]["params"])
    results = {}
    for name, (clean, reg) in streams.items():
        bench = classes[name]
        results[name] = {
            "canary_rps_at_10pct": round(bench.canary_rps, 2),
            "error_rate": bench.traffic.error_rate,
            "regressions": list(bench.regressions),
            "note": bench.note,
            "kiln": summarise(judge_kiln(clean, kiln), judge_kiln(reg, kiln), reg.kind, True),
            "kayenta": _run_kayenta(kayenta, clean, reg, bench),
            "threshold": _run_threshold(threshold, clean, reg, bench),
        }
    return results


def run_bench(
    *,
    rollouts: int = 1000,
    tune_rollouts: int = 300,
    seeds: str = "both",
    classes: list[str] | None = None,
    chosen: dict | None = None,
) -> dict:
    """The benchmark: tune on the "tune" seeds, report on the "report" seeds (or only one of them).

    `seeds="tune"` runs the tuning alone and reports its choices on the tuning streams;
    `seeds="report"` reports with `chosen` (default: the defaults of `AnalysisConfig` and
    of the two baseline judges' configs, i.e. what was committed after tuning).
    """
    started = time.perf_counter()
    every = bench_classes()
    names = classes or list(every)
    picked = {n: every[n] for n in names}
    out: dict = {
        "steps": [{"weight": w, "minutes": t} for w, t in BENCH_STEPS],
        "planned_minutes": HORIZON,
        "max_minutes": MAX_TICKS,
        "latency_samples_per_arm_and_minute": SAMPLE_CAP,
        "tail_quantile": TAIL_QUANTILE,
        "seed_sets": {"tune": SEED_SETS["tune"], "report": SEED_SETS["report"]},
        "targets": TARGETS,
    }
    if seeds in ("tune", "both"):
        grid = [kiln_config(**params) for params in _grid(KILN_GRID)]
        tuning = _simulate_all(picked, tune_rollouts, SEED_SETS["tune"], grid)
        chosen = tune(tuning, picked)
        out["tuning"] = {
            "seeds": "tune",
            "rollouts_per_class": {"healthy": tune_rollouts, "regressed": tune_rollouts},
            "chosen": chosen,
            "classes": report(tuning, picked, chosen),
        }
        del tuning
    if seeds in ("report", "both"):
        if chosen is None:
            chosen = {
                "kiln": {"params": {k: getattr(AnalysisConfig(), k) for k in KILN_GRID}},
                "threshold": {"params": asdict(ThresholdConfig())},
                "kayenta": {"params": asdict(KayentaConfig())},
            }
        watch = [kiln_config(**chosen["kiln"]["params"])]
        streams = _simulate_all(picked, rollouts, SEED_SETS["report"], watch)
        results = report(streams, picked, chosen)
        out["report"] = {
            "seeds": "report",
            "rollouts_per_class": {"healthy": rollouts, "regressed": rollouts},
            "constants": {k: v["params"] for k, v in chosen.items()},
            "classes": results,
            "worst": {j: _worst(results, j) for j in ("kiln", "kayenta", "threshold")},
            "kiln_meets_targets": {
                name: r["kiln"]["false_rollback_rate"] <= TARGETS["false_rollback_rate"]
                and r["kiln"]["regressions_promoted_rate"] <= TARGETS["regressions_promoted_rate"]
                for name, r in results.items()
            },
        }
    if chosen is not None:
        defaults = {
            "kiln": {k: getattr(AnalysisConfig(), k) for k in KILN_GRID},
            "threshold": asdict(ThresholdConfig()),
            "kayenta": asdict(KayentaConfig()),
        }
        # What users get (the defaults) must be what the tuning seeds chose.
        out["defaults_are_the_tuned_constants"] = {
            judge: all(defaults[judge].get(k) == v for k, v in chosen[judge]["params"].items())
            for judge in defaults
        }
    out["wall_seconds"] = round(time.perf_counter() - started, 1)
    return out


__all__ = ["kiln_config", "report", "run_bench", "summarise", "tune"]
