"""Run the judges over every class, tune on one seed set, report on another."""

from __future__ import annotations

import itertools
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict

import numpy as np

from bench.canary.judges import (
    KayentaConfig,
    KilnJudge,
    Outcome,
    ThresholdConfig,
    judge_kayenta,
    judge_threshold,
)
from bench.canary.streams import (
    BENCH_STEPS,
    HORIZON,
    MAX_TICKS,
    SAMPLE_CAP,
    SEED_SETS,
    TAIL_QUANTILE,
    BenchClass,
    Streams,
    bench_classes,
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
    "alarm_confidence": (0.9, 0.99),
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
    bench: BenchClass, *, rollouts: int, seed: int, kiln: list[AnalysisConfig] = ()
) -> tuple[Streams, Streams, list[Outcome], list[Outcome]]:
    """`rollouts` healthy rollouts and `rollouts` regressed ones (split over the class's regressions).

    Simulated together (healthy rows first); Kiln's engine under each configuration of
    `kiln` judges them as they are simulated. Returns the healthy and the regressed
    streams and Kiln's outcomes on each (one per configuration).
    """
    kinds = bench.regressions
    regressed = tuple(kinds[i * len(kinds) // rollouts] for i in range(rollouts))
    judge = KilnJudge(list(kiln), 2 * rollouts) if kiln else None
    both = simulate(
        bench,
        rollouts=2 * rollouts,
        seed=seed,
        regression=(None,) * rollouts + regressed,
        watch=[judge] if judge else [],
    )
    clean, reg = slice(0, rollouts), slice(rollouts, 2 * rollouts)
    outcomes = judge.outcomes() if judge else []
    return (
        both.rows(clean),
        both.rows(reg),
        [o.rows(clean) for o in outcomes],
        [o.rows(reg) for o in outcomes],
    )


def class_results(job: tuple) -> tuple[str, dict]:
    """Simulate one class and judge it under every configuration given (a process-pool job).

    job = (class name, rollouts, seed, Kiln params list, threshold params list, Kayenta
    params list); returns the class name and, per judge, one summary per configuration.
    """
    name, rollouts, seed, kiln_params, threshold_params, kayenta_params = job
    bench = bench_classes()[name]
    configs = [kiln_config(**p) for p in kiln_params]
    clean, reg, kiln_clean, kiln_reg = class_streams(
        bench, rollouts=rollouts, seed=seed, kiln=configs
    )
    rows = {
        "kiln": [
            summarise(c, r, reg.kind, True) for c, r in zip(kiln_clean, kiln_reg, strict=True)
        ],
        "threshold": [
            _run_threshold(ThresholdConfig(**p), clean, reg, bench) for p in threshold_params
        ],
        "kayenta": [_run_kayenta(KayentaConfig(**p), clean, reg, bench) for p in kayenta_params],
    }
    return name, rows


def _run_jobs(jobs: list[tuple], workers: int) -> dict[str, dict]:
    """`class_results` over every job, in `workers` processes (1: in this process)."""
    if workers <= 1 or len(jobs) <= 1:
        return dict(map(class_results, jobs))
    # Spawned, not forked: the caller may be a server or test process with threads and sockets.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return dict(pool.map(class_results, jobs))


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


def _jobs(
    classes: dict[str, BenchClass], rollouts: int, base_seed: int, grids: dict[str, list[dict]]
) -> list[tuple]:
    return [
        (
            name,
            rollouts,
            base_seed + 10_000 * i,
            grids["kiln"],
            grids["threshold"],
            grids["kayenta"],
        )
        for i, name in enumerate(classes)
    ]


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


def tune(rows: dict[str, dict], grids: dict[str, list[dict]]) -> tuple[dict, dict]:
    """Choose each judge's constants on the tuning rows; return the choices and their rows."""
    chosen, picked = {}, {}
    for judge, score_of, grid in (
        ("kiln", _score_safe, KILN_GRID),
        ("threshold", _score_best_case, THRESHOLD_GRID),
        ("kayenta", _score_best_case, KAYENTA_GRID),
    ):
        scores = [score_of([r[judge][i] for r in rows.values()]) for i in range(len(grids[judge]))]
        best = min(range(len(scores)), key=lambda i: scores[i])
        chosen[judge] = {"params": grids[judge][best], "score": list(scores[best]), "grid": grid}
        picked[judge] = best
    return chosen, picked


def _run_threshold(cfg: ThresholdConfig, clean: Streams, reg: Streams, bench: BenchClass) -> dict:
    nominal = _nominal(bench)
    return summarise(
        judge_threshold(clean, cfg, nominal), judge_threshold(reg, cfg, nominal), reg.kind, False
    )


def _run_kayenta(cfg: KayentaConfig, clean: Streams, reg: Streams, bench: BenchClass) -> dict:
    return summarise(judge_kayenta(clean, cfg), judge_kayenta(reg, cfg), reg.kind, False)


def report(rows: dict[str, dict], classes: dict[str, BenchClass], picked: dict[str, int]) -> dict:
    """Every judge with its chosen configuration (index `picked[judge]`) on every class."""
    results = {}
    for name, row in rows.items():
        bench = classes[name]
        results[name] = {
            "canary_rps_at_10pct": round(bench.canary_rps, 2),
            "error_rate": bench.traffic.error_rate,
            "regressions": list(bench.regressions),
            "note": bench.note,
            **{judge: row[judge][picked[judge]] for judge in ("kiln", "kayenta", "threshold")},
        }
    return results


def run_bench(
    *,
    rollouts: int = 1000,
    tune_rollouts: int = 300,
    seeds: str = "both",
    classes: list[str] | None = None,
    chosen: dict | None = None,
    workers: int = 2,
) -> dict:
    """The benchmark: tune on the "tune" seeds, report on the "report" seeds (or only one of them).

    `seeds="tune"` runs the tuning alone and reports its choices on the tuning streams;
    `seeds="report"` reports with `chosen` (default: the defaults of `AnalysisConfig` and
    of the two baseline judges' configs, i.e. what was committed after tuning).
    Classes run in `workers` processes.
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
        grids = {
            "kiln": _grid(KILN_GRID),
            "threshold": _grid(THRESHOLD_GRID),
            "kayenta": _grid(KAYENTA_GRID),
        }
        rows = _run_jobs(_jobs(picked, tune_rollouts, SEED_SETS["tune"], grids), workers)
        chosen, best = tune(rows, grids)
        out["tuning"] = {
            "seeds": "tune",
            "rollouts_per_class": {"healthy": tune_rollouts, "regressed": tune_rollouts},
            "chosen": chosen,
            "classes": report(rows, picked, best),
        }
    if seeds in ("report", "both"):
        if chosen is None:
            chosen = {
                "kiln": {"params": {k: getattr(AnalysisConfig(), k) for k in KILN_GRID}},
                "threshold": {"params": asdict(ThresholdConfig())},
                "kayenta": {"params": asdict(KayentaConfig())},
            }
        grids = {judge: [chosen[judge]["params"]] for judge in ("kiln", "threshold", "kayenta")}
        rows = _run_jobs(_jobs(picked, rollouts, SEED_SETS["report"], grids), workers)
        results = report(rows, picked, dict.fromkeys(grids, 0))
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
