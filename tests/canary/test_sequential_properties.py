"""Adversarial properties of the engine: windows without evidence never move a rollout, bad
settings are refused by name, and a baseline's own noise does not roll a canary back."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.canary.streams import BENCH_STEPS
from canary.sequential import (
    A_ROLLBACK,
    CHANNELS,
    CONTINUE,
    INCONCLUSIVE,
    PROMOTE,
    ROLLBACK,
    AnalysisConfig,
    Analyzer,
    BatchAnalyzer,
    ConfigError,
    Window,
    error_counts,
    override_problems,
    rank_counts,
)
from canary.simulated_traffic import CLASSES, Simulator
from canary.traffic import weight_at

CFG = AnalysisConfig(warmup_ticks=2, horizon_ticks=8, max_ticks=40)
EMPTY_KINDS = ("no_metrics", "baseline_idle", "canary_idle", "both_idle")


def _window(seed: int, requests: int, error_rate: float, scale: float) -> Window:
    rng = np.random.default_rng(seed)
    errors = int(rng.binomial(requests, error_rate))
    latencies = 100.0 * scale * np.exp(0.5 * rng.standard_normal(min(requests, 2000)))
    return Window(requests, errors, latencies)


@st.composite
def evidence_pair(draw):
    """Both arms with traffic: a canary anywhere from much better to much worse."""
    seed = draw(st.integers(0, 2**32 - 1))
    n_b = draw(st.integers(1, 20_000))
    n_c = draw(st.integers(1, 20_000))
    rate = draw(st.sampled_from((0.0, 0.001, 0.01, 0.1)))
    factor = draw(st.sampled_from((0.5, 1.0, 1.0, 1.0, 2.0, 5.0)))
    slow = draw(st.sampled_from((0.8, 1.0, 1.0, 1.3)))
    return (
        _window(seed, n_b, rate, 1.0),
        _window(seed + 1, n_c, min(rate * factor, 1.0), slow),
    )


@st.composite
def empty_pair(draw):
    """A window that carries no evidence: no metrics, or an arm that served nothing."""
    kind = draw(st.sampled_from(EMPTY_KINDS))
    busy = _window(draw(st.integers(0, 2**32 - 1)), draw(st.integers(1, 5000)), 0.01, 1.0)
    idle = Window(0, 0, np.zeros(0))
    return {
        "no_metrics": (None, None),
        "baseline_idle": (idle, busy),
        "canary_idle": (busy, idle),
        "both_idle": (idle, idle),
    }[kind]


def _state(analyzer: Analyzer) -> dict:
    b = analyzer._batch
    out = {}
    for ch in CHANNELS:
        out[f"llr.{ch}"] = float(b.llr[ch][0])
        out[f"accepted.{ch}"] = bool(b.accepted[ch][0])
        out[f"phi.{ch}"] = float(b.phi[ch][0])
        out[f"phi_alarm.{ch}"] = float(b.phi_alarm[ch][0])
    for ch in ("median", "tail"):
        out[f"cusum.{ch}"] = float(b.cusum[ch][0])
    return out


def _is_empty(pair) -> bool:
    baseline, canary = pair
    return baseline is None or canary is None or not baseline.requests or not canary.requests


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    warmup=st.lists(evidence_pair(), min_size=CFG.warmup_ticks, max_size=CFG.warmup_ticks),
    ticks=st.lists(st.one_of(evidence_pair(), empty_pair()), min_size=1, max_size=30),
)
def test_a_window_without_evidence_changes_no_statistic_and_decides_nothing(warmup, ticks):
    analyzer = Analyzer(CFG)
    for baseline, canary in warmup:
        analyzer.update(baseline, canary)
    for pair in ticks:
        before = _state(analyzer)
        decision = analyzer.update(*pair)
        if analyzer.final is not None and analyzer.final is not decision:
            continue  # decided earlier: the final decision is repeated
        if _is_empty(pair):
            assert _state(analyzer) == before
            # No promotion and no rollback is ever first reached on a window without evidence.
            assert decision.action in (CONTINUE, INCONCLUSIVE)
        if decision.action in (PROMOTE, ROLLBACK):
            break


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    warmup=st.lists(evidence_pair(), min_size=CFG.warmup_ticks, max_size=CFG.warmup_ticks),
    evidence=st.lists(evidence_pair(), min_size=1, max_size=15),
    empties=st.lists(empty_pair(), max_size=15),
    order=st.randoms(use_true_random=False),
)
def test_interleaving_empty_windows_never_turns_a_rollout_towards_promotion(
    warmup, evidence, empties, order
):
    """The same evidence with windows without evidence shuffled in anywhere after the warm-up:
    every statistic ends where it ends without them, and a promotion with them is one
    without them."""
    tagged = [(False, p) for p in evidence] + [(True, p) for p in empties]
    order.shuffle(tagged)
    plain, mixed = Analyzer(CFG), Analyzer(CFG)
    for pair in warmup:
        plain.update(*pair)
        mixed.update(*pair)
    plain_decision = mixed_decision = None
    for empty, pair in tagged:
        mixed_decision = mixed.update(*pair)
        if not empty:
            plain_decision = plain.update(*pair)
    if mixed_decision.action == PROMOTE:
        assert plain_decision.action == PROMOTE
    if mixed.final is None and plain.final is None:
        a, b = _state(plain), _state(mixed)
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-9), key


@settings(max_examples=40, deadline=None)
@given(ticks=st.lists(empty_pair(), min_size=1, max_size=CFG.max_ticks))
def test_a_rollout_seeing_only_windows_without_evidence_is_never_decided_either_way(ticks):
    analyzer = Analyzer(CFG)
    for pair in ticks:
        decision = analyzer.update(*pair)
        assert decision.action in (CONTINUE, INCONCLUSIVE)
        assert all(not c["accepted"] for c in decision.channels.values())
    if len(ticks) == CFG.max_ticks:
        assert decision.action == INCONCLUSIVE


NUMERIC = [f.name for f in dataclasses.fields(AnalysisConfig)]
DURATIONS = {"warmup_ticks", "horizon_ticks", "max_ticks"}
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=5),
    st.integers(-(10**6), 10**6),
    st.integers(10**308, 10**400),  # JSON decodes them exactly; float() of them overflows
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(NUMERIC), value=ODD_VALUES)
def test_any_setting_is_accepted_or_refused_naming_that_setting(name, value):
    try:
        cfg = AnalysisConfig(**{name: value})
    except ConfigError as exc:
        # A duration refused for its relation to another (warm-up < planned <= max) may
        # name the other one of the pair.
        assert exc.field == name or {exc.field, name} <= DURATIONS
        return
    # What is accepted is a usable number: the bounds and ratios are finite reals.
    assert math.isfinite(cfg.lower) and math.isfinite(cfg.upper)
    assert not isinstance(getattr(cfg, name), bool)


@pytest.mark.parametrize("name", ["alpha", "beta"])
@pytest.mark.parametrize("value", [2.225073858507e-311, 5e-324, 1e-13])
def test_an_error_rate_too_small_for_finite_bounds_is_refused_by_name(name, value):
    # 1/alpha of a subnormal alpha overflows: Wald's upper bound would be infinite.
    with pytest.raises(ConfigError) as refused:
        AnalysisConfig(**{name: value})
    assert refused.value.field == name and "1e-12" in refused.value.message
    cfg = AnalysisConfig(**{name: 1e-12})
    assert math.isfinite(cfg.lower) and math.isfinite(cfg.upper)


def _false_rollbacks(cfg: AnalysisConfig, rollouts: int = 600) -> float:
    """Share of healthy noisy-baseline canaries rolled back over the bench's 10/25/50% steps."""
    sim = Simulator(CLASSES["noisy_baseline"], rollouts=rollouts, seed=77, sample_cap=1000)
    batch = BatchAnalyzer(cfg, rollouts)
    rolled_back = np.zeros(rollouts, dtype=bool)
    for t in range(cfg.horizon_ticks):
        d = sim.tick(t, weight_at(BENCH_STEPS, t))
        median, tail = rank_counts(d.lat_b, d.lat_c, (0.5, cfg.tail_quantile))
        actions, _ = batch.update_counts(
            error_counts(d.req_b, d.err_b, d.req_c, d.err_c), median, tail
        )
        rolled_back |= actions == A_ROLLBACK
    return float(rolled_back.mean())


def test_a_baseline_whose_own_latency_wobbles_does_not_roll_healthy_canaries_back():
    """The baseline's latency scale wobbles 6% tick to tick (the canary's does not): early on
    its share of slow requests looks like a canary shift. Read at the upper bound of the
    dispersion, the alarms hold; read at the point estimate (confidence 0.5), 3% of healthy
    canaries are rolled back."""
    cfg = AnalysisConfig(horizon_ticks=30, max_ticks=90)
    assert _false_rollbacks(cfg) <= 0.005
    assert _false_rollbacks(dataclasses.replace(cfg, alarm_confidence=0.5)) > 0.02


# Every setting a rollout may override, over the whole range of floats: each is accepted or
# refused (by AnalysisConfig, or past the limits a new rollout may ask for), and what is
# accepted analyses any traffic into a decision JSON can store.
OVERRIDES = {
    "alpha": st.floats(0, 0.5),
    "beta": st.floats(0, 0.5),
    "error_ratio": st.floats(1, 1e308),
    "median_ratio": st.floats(1, 1e308),
    "tail_ratio": st.floats(1, 1e308),
    "median_shift": st.floats(1, 1e308),
    "tail_shift": st.floats(1, 1e308),
    "cusum_threshold": st.floats(0, 1e308),
    "dispersion_prior": st.one_of(st.floats(0, 1e308), st.just(math.inf)),
    "dispersion_ticks": st.floats(0, 1e308),
    "alarm_confidence": st.floats(0.5, 1),
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    overrides=st.fixed_dictionaries({}, optional=OVERRIDES),
    errors=st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
    seed=st.integers(0, 2**16),
)
def test_what_a_config_accepts_analyses_into_decisions_json_can_store(overrides, errors, seed):
    try:
        cfg = AnalysisConfig(horizon_ticks=6, max_ticks=8, warmup_ticks=1, **overrides)
    except ConfigError:
        return
    if override_problems(overrides):
        return
    rng = np.random.default_rng(seed)
    analyzer = Analyzer(cfg)
    for _ in range(cfg.max_ticks):
        baseline = Window(1000, errors[0], rng.gamma(2.0, 30.0, 50))
        canary = Window(1000, errors[1], rng.gamma(2.0, 40.0, 50))
        decision = analyzer.update(baseline, canary)
        json.dumps(decision.as_dict(), allow_nan=False)  # ValueError on inf or NaN
        if decision.action != CONTINUE:
            break


def test_a_setting_past_a_new_rollouts_limits_still_builds_for_a_rollout_stored_before():
    # A rollout created before the limits keeps ticking: only creation refuses them.
    cfg = AnalysisConfig(error_ratio=2000.0, cusum_threshold=1e7)
    assert (cfg.error_ratio, cfg.cusum_threshold) == (2000.0, 1e7)
    asked = {"error_ratio": 2000.0, "cusum_threshold": 1e7, "dispersion_prior": math.inf}
    assert [p.field for p in override_problems(asked)] == ["error_ratio", "cusum_threshold"]


def test_a_refused_duration_counts_its_ticks_in_words():
    with pytest.raises(ConfigError) as refused:
        AnalysisConfig(horizon_ticks=1, warmup_ticks=1, max_ticks=3)
    assert "the analysis (1 tick) must be longer than its warm-up (1 tick)" in str(refused.value)
