"""Promotion needs evidence: low traffic, tail-only regressions, empty windows, max duration, sample sizes.

Each of these failed on the engine that promoted at the horizon without evidence.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from canary.sequential import (
    A_PROMOTE,
    A_ROLLBACK,
    CONTINUE,
    INCONCLUSIVE,
    PROMOTE,
    AnalysisConfig,
    Analyzer,
    BatchAnalyzer,
    ConfigError,
    Window,
    error_counts,
    latency_counts,
    rank_counts,
)
from canary.simulated_traffic import CLASSES, Simulator, with_volume


def _batch_outcomes(sim: Simulator, cfg: AnalysisConfig, weight: float) -> np.ndarray:
    """Final action code per rollout (0 if still undecided after max_ticks)."""
    engine = BatchAnalyzer(cfg, sim.rollouts)
    final = np.zeros(sim.rollouts, dtype=int)
    for t in range(cfg.max_ticks):
        d = sim.tick(t, weight)
        actions, _ = engine.update_counts(
            error_counts(d.req_b, d.err_b, d.req_c, d.err_c),
            latency_counts(d.lat_b, d.lat_c, 0.5),
            latency_counts(d.lat_b, d.lat_c, cfg.tail_quantile),
        )
        new = (final == 0) & (actions != 0)
        final[new] = actions[new]
        if (final != 0).all():
            break
    return final


def test_doubling_the_error_rate_at_low_traffic_is_never_promoted():
    # 30 requests/s, 10% to the canary (3/s), 0.1% errors: a minute brings ~0.2 canary
    # errors, far too few for the error SPRT to accept within the max duration.
    cls = dataclasses.replace(CLASSES["steady"], volume=30 * 60, error_rate=0.001)
    sim = Simulator(cls, rollouts=200, seed=41, regression="errors", sample_cap=5000)
    final = _batch_outcomes(sim, AnalysisConfig(), weight=10)
    assert np.mean(final == A_PROMOTE) <= 0.03


def test_a_regression_confined_to_the_slowest_two_percent_is_caught_on_heavy_tails():
    # +50% on the slowest 2% only (Pareto tail, index 1.3): the share above the pooled
    # p95 does not move, the share above the pooled p99.5 grows by ~1.5^1.3 = 1.7.
    sim = Simulator(
        CLASSES["heavy_tailed"], rollouts=150, seed=42, regression="latency_tail", sample_cap=2000
    )
    final = _batch_outcomes(sim, AnalysisConfig(), weight=50)
    assert np.mean(final == A_PROMOTE) <= 0.05
    assert np.mean(final == A_ROLLBACK) >= 0.8


def test_empty_windows_never_move_a_rollout_towards_promotion():
    cfg = AnalysisConfig(warmup_ticks=1, horizon_ticks=10, max_ticks=30)
    rng = np.random.default_rng(3)
    analyzer = Analyzer(cfg)
    lat = lambda n: rng.lognormal(np.log(100), 0.4, n)  # noqa: E731
    decision = analyzer.update(Window(1000, 10, lat(500)), Window(1000, 10, lat(500)))
    for _ in range(4):  # some real evidence first
        decision = analyzer.update(Window(1000, 10, lat(500)), Window(1000, 10, lat(500)))
    before = {ch: c["llr"] for ch, c in decision.channels.items()}
    for tick in range(40):
        # No traffic in an arm, then no metrics at all (an outage), alternating.
        decision = (
            analyzer.update(Window(1000, 5, lat(500)), Window(0, 0))
            if tick % 2
            else analyzer.update(None, None)
        )
        assert decision.action != PROMOTE
        assert {ch: c["llr"] for ch, c in decision.channels.items()} == before
        if decision.action != CONTINUE:
            break
    assert decision.action == INCONCLUSIVE
    assert decision.empty_ticks > 0


def test_only_empty_windows_end_inconclusive_with_too_many_empty_windows():
    cfg = AnalysisConfig(warmup_ticks=1, horizon_ticks=10, max_ticks=30)
    analyzer = Analyzer(cfg)
    decisions = [analyzer.update(Window(0, 0), Window(0, 0)) for _ in range(10)]
    assert [d.action for d in decisions[:-1]] == [CONTINUE] * 9
    assert decisions[-1].action == INCONCLUSIVE and "without traffic" in decisions[-1].reason


def test_reaching_the_max_duration_undecided_is_inconclusive():
    # 60 requests a tick, 1% errors: evidence accrues, too slowly for 30 ticks.
    cfg = AnalysisConfig(horizon_ticks=30, max_ticks=30)
    sim = Simulator(with_volume(CLASSES["steady"], 60.0), seed=5)
    analyzer = Analyzer(cfg)
    for t in range(cfg.max_ticks):
        d = sim.tick(t, 50)
        decision = analyzer.update(
            Window(int(d.req_b[0]), int(d.err_b[0]), d.lat_b[0]),
            Window(int(d.req_c[0]), int(d.err_c[0]), d.lat_c[0]),
        )
        if decision.action != CONTINUE:
            break
    assert decision.action == INCONCLUSIVE and decision.tick == cfg.max_ticks
    assert "max duration" in decision.reason


def test_the_sample_size_estimate_decreases_as_evidence_accumulates():
    # One rollout's estimate follows its llr, noisy tick to tick; over 60 rollouts the
    # median estimate falls with every 10 ticks of evidence (0 once promoted).
    cfg = AnalysisConfig(horizon_ticks=60, max_ticks=200)
    rollouts = 60
    sim = Simulator(
        with_volume(CLASSES["steady"], 1200.0), rollouts=rollouts, seed=6, sample_cap=2000
    )
    batch = BatchAnalyzer(cfg, rollouts)
    needed = []
    for t in range(40):
        d = sim.tick(t, 25)
        median, tail = rank_counts(d.lat_b, d.lat_c, (0.5, cfg.tail_quantile))
        batch.update_counts(error_counts(d.req_b, d.err_b, d.req_c, d.err_c), median, tail)
        if t >= cfg.warmup_ticks:
            requests = batch.needed_ticks() * batch.canary_requests
            assert np.all(requests >= 0)
            needed.append(float(np.median(requests)))
    tens = [np.mean(needed[i : i + 5]) for i in range(0, len(needed) - 5, 10)]
    assert len(tens) >= 3 and all(a > b for a, b in zip(tens, tens[1:], strict=False))
    assert needed[-1] < 0.5 * needed[0]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"beta": 0.7}, "beta"),
        ({"alpha": 0.6}, "alpha"),
        ({"error_ratio": 1.0}, "error_ratio"),
        ({"median_ratio": 0.8}, "median_ratio"),
        ({"tail_ratio": 1.0}, "tail_ratio"),
        ({"warmup_ticks": 10, "horizon_ticks": 10}, "horizon_ticks"),
        ({"warmup_ticks": 5, "horizon_ticks": 8, "max_ticks": 4}, "max_ticks"),
        # Not numbers at all: refused by name too, never a TypeError.
        ({"cusum_threshold": "9"}, "cusum_threshold"),
        ({"dispersion_ticks": float("nan")}, "dispersion_ticks"),
        ({"tail_quantile": None}, "tail_quantile"),
        ({"beta": True}, "beta"),
        ({"alarm_confidence": 1.0}, "alarm_confidence"),
    ],
    ids=[
        "alpha-0",
        "beta-high",
        "alpha-high",
        "errors-x1",
        "median-below-1",
        "tail-x1",
        "horizon-not-past-warmup",
        "max-shorter-than-warmup",
        "cusum-a-string",
        "dispersion-nan",
        "tail-quantile-none",
        "beta-a-bool",
        "alarm-certain",
    ],
)
def test_impossible_settings_name_the_field(overrides, field):
    with pytest.raises(ConfigError) as exc:
        AnalysisConfig(**overrides)
    assert exc.value.field == field and field in str(exc.value)
