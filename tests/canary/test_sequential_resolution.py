"""Histogram resolution is part of the decision: a bucket that can hide the design shift never promotes.

Latency read from Istio's default buckets (…, 50, 100, 250, … ms) knows a 60 ms request
and a 75 ms one only as "at most 100 ms": a +25% median shift inside that bucket is
invisible, and the median channel would accept "not worse" for exactly the canary it
exists to catch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from canary.sequential import (
    A_INCONCLUSIVE,
    A_PROMOTE,
    INCONCLUSIVE,
    PROMOTE,
    ROLLBACK,
    AnalysisConfig,
    Analyzer,
    BatchAnalyzer,
    ConfigError,
    Evidence,
    Window,
    error_counts,
    evidence,
    latency_counts,
)
from canary.sequential.resolution import (
    bucket_of,
    channel_resolution,
    native_bounds,
    native_factor,
    resolution_text,
    resolves,
    resolving_bounds,
    schema_for,
)

# Istio's default bounds of istio_request_duration_milliseconds.
ISTIO_MS = (0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
ISTIO_MS += (300000, 600000, 1800000, 3600000)
NATIVE_3 = tuple(native_bounds(3, 0.5, 60_000))  # schema 3: factor 2^(1/8) = 1.09


def bucketed(latencies: np.ndarray, bounds: tuple[float, ...]) -> np.ndarray:
    """Each latency at its bucket's upper bound, as a histogram reports it (+Inf: twice the top)."""
    edges = np.asarray(bounds, dtype=float)
    i = np.searchsorted(edges, latencies, side="left")
    return np.where(i < edges.size, edges[np.minimum(i, edges.size - 1)], 2 * edges[-1])


@pytest.mark.parametrize(
    ("lo", "hi", "shift", "expected"),
    [
        # 60 ms and 75 ms both lie in (50, 100]: 100 > 1.25 * 50 = 62.5, the shift can hide.
        (50.0, 100.0, 1.25, False),
        # (50, 62.5]: 62.5 <= 1.25 * 50, any x in the bucket moves to 1.25 x > 62.5.
        (50.0, 62.5, 1.25, True),
        # Istio's (100, 250] cannot hide a +150% shift (250 <= 2.5 * 100), only a smaller one.
        (100.0, 250.0, 2.5, True),
        (100.0, 250.0, 1.5, False),
        # The first bucket (0, hi] holds x and 1.25 x for every x <= hi / 1.25.
        (0.0, 0.5, 1.25, False),
        # The overflow bucket (lo, +Inf) holds everything above lo.
        (3_600_000.0, math.inf, 10.0, False),
    ],
    ids=["istio-50-100", "narrow", "wide-shift", "istio-tail", "first", "overflow"],
)
def test_a_bucket_resolves_a_shift_only_when_it_is_no_wider_than_the_shift(lo, hi, shift, expected):
    assert resolves(lo, hi, shift) is expected


@pytest.mark.parametrize(
    ("shift", "schema"),
    [
        # 2^(2^-2) = 1.189 <= 1.25 < 2^(2^-1) = 1.414: schema 2 for a +25% median shift.
        (1.25, 2),
        # 1.414 <= 1.5 < 2: schema 1 for the +50% tail stretch.
        (1.5, 1),
        # 2^(2^-8) = 1.0027 > 1.001: no native schema is that fine.
        (1.001, None),
    ],
    ids=["median", "tail", "too-fine"],
)
def test_the_coarsest_native_schema_that_resolves_a_shift(shift, schema):
    assert schema_for(shift) == schema
    if schema is not None:
        assert native_factor(schema) <= shift < native_factor(schema - 1)


def test_native_bounds_grow_by_the_schema_factor_so_every_bucket_resolves():
    bounds = native_bounds(3, 10.0, 1000.0)
    ratios = bounds[1:] / bounds[:-1]
    assert np.allclose(ratios, 2 ** (1 / 8))
    lo, hi = bucket_of(bounds, 75.0)
    assert lo < 75.0 <= hi and resolves(lo, hi, 1.25)


def test_the_bounds_that_would_resolve_a_bucket_step_by_the_shift():
    # 50 * 1.25 = 62.5, * 1.25 = 78.125, * 1.25 = 97.66; the next, 122, is past 100.
    assert resolving_bounds(50.0, 100.0, 1.25) == [62.5, 78.1, 97.7]
    # The first bucket: downwards from its bound, 0.5 / 1.25 = 0.4, 0.32, ...
    assert resolving_bounds(0.0, 0.5, 1.25)[-2:] == [0.32, 0.4]


def test_a_channel_reports_its_bucket_and_how_to_resolve_it():
    res = channel_resolution(ISTIO_MS, 100.0, 1.25)
    assert res == {
        "bucket_ms": [50.0, 100.0],
        "shift": 1.25,
        "resolved": False,
        "add_bounds_ms": [62.5, 78.1, 97.7],
        "native_schema": 2,
    }
    text = resolution_text("median latency", res)
    assert "50–100 ms bucket can hide a +25% shift" in text
    assert "62.5, 78.1, 97.7 ms" in text and "schema 2" in text


def _run(cfg: AnalysisConfig, shift: float, bounds: tuple[float, ...] | None, seed: int):
    """One rollout of a narrow 60 ms body (+`shift` on the canary) until it decides."""
    rng = np.random.default_rng(seed)
    analyzer = Analyzer(cfg)
    decision = None
    for _ in range(cfg.max_ticks):
        b = rng.lognormal(math.log(60), 0.04, 3000)
        c = rng.lognormal(math.log(60 * shift), 0.04, 3000)
        if bounds is not None:
            b, c = bucketed(b, bounds), bucketed(c, bounds)
        decision = analyzer.update(
            Window(3000, 3, b, bounds_ms=bounds), Window(3000, 3, c, bounds_ms=bounds)
        )
        if decision.action != "continue":
            break
    return decision


def test_a_median_shift_inside_one_istio_bucket_is_held_inconclusive_not_promoted():
    cfg = AnalysisConfig(horizon_ticks=20, max_ticks=40)
    # 60 -> 75 ms with a body 4% wide: every request of both arms is in (50, 100].
    seen_raw = _run(cfg, 1.25, None, seed=5)
    assert seen_raw.action == ROLLBACK  # raw samples see the shift
    # Read through Istio's buckets both arms look identical: counting alone would promote.
    decision = _run(cfg, 1.25, ISTIO_MS, seed=5)
    assert decision.action == INCONCLUSIVE
    assert "buckets cannot resolve the design shift" in decision.reason
    assert decision.channels["median"]["resolved"] is False
    assert decision.channels["median"]["accepted"] is False
    assert decision.channels["median"]["held"] is True
    assert decision.resolution["median"]["bucket_ms"] == [50.0, 100.0]
    assert "62.5, 78.1, 97.7 ms" in decision.settle
    assert "schema 2" in decision.settle


def test_without_its_bounds_the_same_bucketed_data_would_promote_the_regression():
    # The hazard the bounds guard against: the same bucketed latencies, engine told nothing.
    cfg = AnalysisConfig(horizon_ticks=20, max_ticks=40)
    rng = np.random.default_rng(5)
    analyzer = Analyzer(cfg)
    for _ in range(cfg.max_ticks):
        b = bucketed(rng.lognormal(math.log(60), 0.04, 3000), ISTIO_MS)
        c = bucketed(rng.lognormal(math.log(75), 0.04, 3000), ISTIO_MS)
        decision = analyzer.update(Window(3000, 3, b), Window(3000, 3, c))
        if decision.action != "continue":
            break
    assert decision.action == PROMOTE


def test_native_histograms_resolve_the_shift_and_promote_a_healthy_canary():
    cfg = AnalysisConfig(horizon_ticks=20, max_ticks=60)
    healthy = _run(cfg, 1.0, NATIVE_3, seed=7)
    assert healthy.action == PROMOTE
    assert healthy.channels["median"]["resolved"] is True
    assert healthy.resolution["median"]["resolved"] is True
    regressed = _run(cfg, 1.25, NATIVE_3, seed=7)
    assert regressed.action == ROLLBACK


def test_unresolved_buckets_still_roll_a_gross_regression_back():
    # 60 -> 300 ms crosses from (50, 100] to (250, 500]: the buckets see it, the CUSUM fires.
    decision = _run(AnalysisConfig(horizon_ticks=20, max_ticks=40), 5.0, ISTIO_MS, seed=9)
    assert decision.action == ROLLBACK


def test_a_healthy_canary_on_istio_buckets_is_held_with_the_reason():
    decision = _run(AnalysisConfig(horizon_ticks=20, max_ticks=40), 1.0, ISTIO_MS, seed=11)
    assert decision.action == INCONCLUSIVE
    assert decision.channels["errors"]["accepted"] is True
    assert not decision.channels["median"]["accepted"]


def test_resolution_is_stored_with_the_evidence_and_replays_to_the_same_decision():
    cfg = AnalysisConfig(horizon_ticks=20, max_ticks=40)
    rng = np.random.default_rng(3)
    live = Analyzer(cfg)
    stored = []
    for _ in range(cfg.max_ticks):
        b = Window(3000, 3, bucketed(rng.lognormal(4.1, 0.04, 3000), ISTIO_MS), ISTIO_MS)
        c = Window(3000, 3, bucketed(rng.lognormal(4.1, 0.04, 3000), ISTIO_MS), ISTIO_MS)
        ev = evidence(b, c, cfg)
        stored.append(ev.as_dict())
        decision = live.observe(ev)
        if decision.action != "continue":
            break
    assert stored[-1]["resolution"]["median"]["resolved"] is False
    replayed = Analyzer(cfg).replay([Evidence.from_dict(e) for e in stored])
    assert replayed.as_dict() == decision.as_dict()
    # Rows stored before resolution existed read as raw samples: nothing unresolved.
    old = {k: v for k, v in stored[0].items() if k != "resolution"}
    assert Evidence.from_dict(old).unresolved("median") is False


def test_the_batch_engine_holds_only_the_rows_whose_buckets_are_unresolved():
    cfg = AnalysisConfig(horizon_ticks=20, max_ticks=40)
    rng = np.random.default_rng(13)
    engine = BatchAnalyzer(cfg, 2)
    final = np.zeros(2, dtype=int)
    for _ in range(cfg.max_ticks):
        lat_b = rng.lognormal(4.1, 0.3, (2, 2000))
        lat_c = rng.lognormal(4.1, 0.3, (2, 2000))
        actions, reasons = engine.update_counts(
            error_counts([2000] * 2, [2] * 2, [2000] * 2, [2] * 2),
            latency_counts(lat_b, lat_c, 0.5),
            latency_counts(lat_b, lat_c, cfg.tail_quantile),
            # Row 0 reads unresolving buckets for its median, row 1 resolving ones.
            unresolved={"median": np.array([True, False]), "tail": np.array([False, False])},
        )
        new = (final == 0) & (actions != 0)
        final[new] = actions[new]
        if (final != 0).all():
            break
    assert final.tolist() == [A_INCONCLUSIVE, A_PROMOTE]


@pytest.mark.parametrize(
    "bounds",
    [(), (-1.0, 5.0), (0.0, 5.0), (5.0, math.inf), (math.nan,)],
    ids=["empty", "negative", "zero", "infinite", "nan"],
)
def test_window_bounds_must_be_finite_and_positive(bounds):
    with pytest.raises(ValueError, match="bucket bounds"):
        Window(10, 0, np.full(10, 5.0), bounds_ms=bounds)


@pytest.mark.parametrize("name", ["median_shift", "tail_shift"])
@pytest.mark.parametrize("value", [1.0, 0.5, math.nan, math.inf])
def test_a_design_shift_must_be_a_finite_number_above_one(name, value):
    with pytest.raises(ConfigError) as exc:
        AnalysisConfig(**{name: value})
    assert exc.value.field == name
