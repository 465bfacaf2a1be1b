"""The benchmark harness and the simulator it shares with the simulated metrics source."""

from __future__ import annotations

import json
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command

from canary.bench import DEFAULT_STEPS, ThresholdConfig, ThresholdJudge, weight_at
from canary.simulate import CLASSES, Simulator, latency_quantile, norm_ppf, p99_stretch


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
        rollouts=2,
        horizon=10,
    )
    lat = np.full((2, 10), 100.0)
    # Rollout 0: 3% errors (over 2 x 1%), rollout 1: 1%. Two failures exceed the limit of 1.
    req, err = np.array([100.0, 100.0]), np.array([3.0, 1.0])
    assert list(judge.update(req, err, lat)) == [0, 0]
    assert list(judge.update(req, err, lat)) == [2, 0]


def test_canary_bench_command_prints_json_for_both_judges():
    out = StringIO()
    call_command("canary_bench", "--rollouts", "30", "--classes", "steady", "--json", stdout=out)
    report = json.loads(out.getvalue())
    steady = report["classes"]["steady"]
    assert set(steady) == {"kiln", "threshold"}
    assert steady["kiln"]["false_rollback_rate"] == 0.0
    assert steady["kiln"]["missed_regression_rate"] <= 0.1
    assert report["rollouts_per_class"] == {"clean": 30, "regressed": 30}
