"""The benchmark harness and the simulator it shares with the simulated metrics source."""

from __future__ import annotations

import json
import math
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command

from bench.canary import (
    DEFAULT_STEPS,
    ThresholdConfig,
    ThresholdJudge,
    mann_whitney_p,
    weight_at,
)
from canary.simulated_traffic import CLASSES, Simulator, latency_quantile, norm_ppf, p99_stretch


def test_simulated_ticks_are_deterministic_per_seed_and_tick():
    a = Simulator(CLASSES["retry_storm"], rollouts=3, seed=4).tick(7, 25)
    b = Simulator(CLASSES["retry_storm"], rollouts=3, seed=4).tick(7, 25)
    assert np.array_equal(a.err_c, b.err_c) and np.array_equal(a.lat_b, b.lat_b)
    c = Simulator(CLASSES["retry_storm"], rollouts=3, seed=5).tick(7, 25)
    assert not np.array_equal(a.lat_b, c.lat_b)


def test_the_injected_latency_regressions_have_the_promised_size():
    cls = CLASSES["steady"]
    # norm_ppf against known quantiles of the standard normal.
    assert np.allclose(
        norm_ppf(np.array([0.5, 0.975, 0.01])), [0.0, 1.959964, -2.326348], atol=1e-6
    )
    u = np.array([0.5, 0.99])
    base = latency_quantile(cls, u)
    stretched = base * p99_stretch(u)
    assert stretched[0] == base[0]  # the median is untouched
    assert stretched[1] / base[1] == pytest.approx(1.5)  # +50% at the p99


def test_weights_follow_the_step_schedule():
    assert [weight_at(DEFAULT_STEPS, t) for t in (0, 7, 8, 19, 20, 39, 99)] == [
        5,
        5,
        25,
        25,
        50,
        50,
        50,
    ]


def test_threshold_judge_fails_windows_over_its_fixed_limits():
    judge = ThresholdJudge(
        ThresholdConfig(failure_limit=1, initial_delay=0),
        {"error_rate": 0.01, "p50_ms": 100.0, "p99_ms": 300.0},
        rollouts=3,
        horizon=10,
    )
    p50, p99 = np.full(3, 100.0), np.full(3, 100.0)
    # Rollout 0: 3% errors (over 2 x 1%), rollout 1: 1%. Two failures exceed the limit of 1.
    # Rollout 2: 3% errors too, but its metrics are missing: an errored measurement fails nothing.
    req, err = np.array([100.0, 100.0, 100.0]), np.array([3.0, 1.0, 3.0])
    missing = np.array([False, False, True])
    assert list(judge.update(req, err, p50, p99, missing)) == [0, 0, 0]
    assert list(judge.update(req, err, p50, p99, missing)) == [2, 0, 0]


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        # U = 0 of 9 pairs: z = (0 - 4.5) / sqrt(3 * 3 * 7 / 12) = -1.964, p = erfc(1.964/sqrt 2).
        ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], math.erfc(4.5 / math.sqrt(5.25) / math.sqrt(2))),
        # Identical samples: U = n1 n2 / 2, p = 1.
        ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], 1.0),
        # All tied: no variance, no evidence.
        ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 1.0),
    ],
    ids=["separated", "identical", "all-tied"],
)
def test_mann_whitney_worked_cases(x, y, expected):
    x, y = np.array([x]), np.array([y])
    ones = np.ones_like(x, dtype=bool)
    assert mann_whitney_p(x, y, ones, ones)[0] == pytest.approx(expected, rel=1e-9)


def test_canary_bench_reports_three_judges_on_the_report_seeds():
    out = StringIO()
    call_command(
        "canary_bench",
        "--seeds",
        "report",
        "--rollouts",
        "30",
        "--classes",
        "err1%_canary50rps",
        "err0.1%_canary1rps",
        stdout=out,
    )
    report = json.loads(out.getvalue())
    assert report["machine"]["nproc"] >= 1 and report["command"].startswith("python manage.py")
    assert "tuning" not in report and report["report"]["seeds"] == "report"
    busy = report["report"]["classes"]["err1%_canary50rps"]
    assert set(busy) >= {"kiln", "kayenta", "threshold"}
    assert busy["kiln"]["false_rollback_rate"] == 0.0
    assert busy["kiln"]["healthy_promoted_rate"] >= 0.9
    assert busy["kiln"]["regressions_promoted_rate"] <= 0.1
    # 1 canary request/s at 0.1% errors cannot be decided in 90 minutes: held, with what would.
    sparse = report["report"]["classes"]["err0.1%_canary1rps"]["kiln"]
    assert sparse["healthy_inconclusive_rate"] >= 0.9 and sparse["regressions_promoted_rate"] == 0.0
    needs = sparse["inconclusive_healthy"]
    assert needs["undecided_channel"] == "errors"
    assert needs["canary_rps_that_would_decide_within_max_duration"] > 1.0


def test_tuning_runs_on_other_seeds_than_the_report():
    out = StringIO()
    call_command(
        "canary_bench",
        "--seeds",
        "tune",
        "--tune-rollouts",
        "12",
        "--classes",
        "steady",
        stdout=out,
    )
    report = json.loads(out.getvalue())
    assert report["tuning"]["seeds"] == "tune" and "report" not in report
    assert report["seed_sets"]["tune"] != report["seed_sets"]["report"]
    chosen = report["tuning"]["chosen"]
    assert set(chosen) == {"kiln", "threshold", "kayenta"}
    assert set(chosen["kiln"]["params"]) == {
        "alpha",
        "beta",
        "cusum_threshold",
        "dispersion_ticks",
        "alarm_confidence",
    }
