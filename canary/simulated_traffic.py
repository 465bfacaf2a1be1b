"""Simulated canary traffic: the simulated cluster's traffic classes and metrics (the bench reuses them).

Pure numpy, deterministic for a given seed and tick (each tick draws from its own
generator seeded by (seed, tick), and episodes such as bursts and retry storms are
drawn once per rollout up front), so the simulated metrics source can be asked for
any tick of any rollout in any order and always answers the same.

A tick is one analysis interval (a minute). `volume` is the requests of that tick
across both arms; the canary receives `weight` percent of them (the router's
split). Latencies come from a quantile function Q(u) so that "+25% at the median"
and "+50% at p99" are exact statements about the canary's distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

MAX_TICKS = 256
REGRESSIONS = ("errors", "latency_median", "latency_p99", "latency_tail")


@dataclass(frozen=True)
class TrafficClass:
    """One kind of production traffic; all rates are per tick and shared by both arms unless noted."""

    name: str
    volume: float = 3000.0  # requests per tick, both arms
    error_rate: float = 0.01
    median_ms: float = 120.0
    sigma: float = 0.5  # log-normal shape of the latency body
    pareto_alpha: float = 0.0  # > 0: Pareto tail above u = 0.95 (heavy-tailed latency)
    diurnal_amplitude: float = 0.0  # volume x (1 + a sin); errors and latency rise with load
    burst_prob: float = 0.0  # per tick: volume x3, errors x4, latency x1.5 in both arms
    storm_prob: float = 0.0  # per tick start of a retry storm (1-4 ticks)
    storm_error_factor: float = 6.0
    storm_clump_mean: float = 6.0  # errors per failed call once retries pile up
    warmup_ticks: float = 0.0  # canary slow and erratic at first, decaying with this time constant
    baseline_noise: float = 0.0  # log-sd of the baseline's own per-tick error-rate wobble
    baseline_latency_noise: float = 0.0  # log-sd of the baseline's per-tick latency scale
    zero_traffic_prob: float = 0.0  # per tick: the window has no requests at all
    outage: tuple[int, int] = (0, 0)  # (first tick, ticks): the metrics source answers nothing


CLASSES: dict[str, TrafficClass] = {
    c.name: c
    for c in (
        TrafficClass("steady"),
        TrafficClass("diurnal", diurnal_amplitude=0.6),
        TrafficClass("bursty", burst_prob=0.12),
        TrafficClass("retry_storm", storm_prob=0.06),
        TrafficClass("heavy_tailed", pareto_alpha=1.3, sigma=0.6),
        TrafficClass("low_traffic", volume=400.0, error_rate=0.02),
        TrafficClass("canary_warmup", warmup_ticks=1.5),
        TrafficClass("noisy_baseline", baseline_noise=0.35, baseline_latency_noise=0.06),
        # 500 requests/s: enough evidence for a short rollout (demos, browser tests).
        TrafficClass("high_volume", volume=30_000.0),
        # 2,000 requests/s: at an even split one tick carries ~600 requests above the pooled
        # p99.5, enough for the tail channel to accept in one or two ticks (end-to-end bench).
        TrafficClass("busy", volume=120_000.0),
    )
}


def norm_ppf(u: np.ndarray) -> np.ndarray:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (
        -39.69683028665376,
        220.9460984245205,
        -275.9285104469687,
        138.3577518672690,
        -30.66479806614716,
        2.506628277459239,
    )
    b = (
        -54.47609879822406,
        161.5858368580409,
        -155.6989798598866,
        66.80131188771972,
        -13.28068155288572,
    )
    c = (
        -7.784894002430293e-03,
        -0.3223964580411365,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    )
    d = (7.784695709041462e-03, 0.3224671290700398, 2.445134137142996, 3.754408661907416)
    u = np.clip(np.asarray(u, dtype=float), 1e-12, 1 - 1e-12)
    out = np.empty_like(u)
    lo = u < 0.02425
    hi = u > 1 - 0.02425
    mid = ~(lo | hi)
    q = u[mid] - 0.5
    r = q * q
    out[mid] = (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * q
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    )
    for mask, sign in ((lo, 1.0), (hi, -1.0)):
        uu = u[mask] if sign > 0 else 1 - u[mask]
        q = np.sqrt(-2 * np.log(uu))
        out[mask] = (
            sign
            * (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
            / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
        )
    return out


def norm_sf(z: np.ndarray) -> np.ndarray:
    """Upper tail 1 - Phi(z) of the standard normal (erfc by Chebyshev fit, relative error < 1.2e-7)."""
    x = np.abs(np.asarray(z, dtype=float)) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.5 * x)
    poly = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t
                    * (
                        0.27886807
                        + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                    )
                )
            )
        )
    )
    erfc = t * np.exp(-x * x + poly)
    return np.where(np.asarray(z) >= 0, 0.5 * erfc, 1.0 - 0.5 * erfc)


Z95 = 1.6448536269514722  # Phi^-1(0.95): where the Pareto tail starts
Z98 = 2.0537489106318225  # Phi^-1(0.98): the slowest 2%
Z90 = 1.2815515655446004  # Phi^-1(0.90)
Z99 = 2.3263478740408408  # Phi^-1(0.99)


def latency_from_normal(cls: TrafficClass, z: np.ndarray) -> np.ndarray:
    """Q(Phi(z)) for standard normal draws z: the same latency law as `latency_quantile`.

    Drawing z directly costs one exponential per sample instead of an inverse normal;
    the Pareto tail needs Phi only for the 5% of draws above its start.
    """
    x = cls.median_ms * np.exp(cls.sigma * z)
    if cls.pareto_alpha > 0:
        hi = z > Z95
        x95 = cls.median_ms * np.exp(cls.sigma * Z95)
        x[hi] = x95 * (0.05 / np.maximum(norm_sf(z[hi]), 1e-12)) ** (1 / cls.pareto_alpha)
    return x


def stretch_from_normal(regression: str, z: np.ndarray) -> np.ndarray:
    """The latency factor of a tail regression for standard normal draws z (u = Phi(z))."""
    out = np.ones_like(z)
    if regression == "latency_tail":
        out[z > Z98] = 1.5
    elif regression == "latency_p99":
        out[z >= Z99] = 1.5
        mid = (z > Z90) & (z < Z99)
        out[mid] = p99_stretch(1.0 - norm_sf(z[mid]))
    return out


def latency_quantile(cls: TrafficClass, u: np.ndarray) -> np.ndarray:
    """Q(u) of the class's latency in ms: log-normal body, optional Pareto tail above u = 0.95."""
    x = cls.median_ms * np.exp(cls.sigma * norm_ppf(u))
    if cls.pareto_alpha > 0:
        x95 = cls.median_ms * np.exp(cls.sigma * 1.6448536269514722)
        tail = x95 * (0.05 / np.maximum(1 - u, 1e-12)) ** (1 / cls.pareto_alpha)
        x = np.where(u > 0.95, tail, x)
    return x


def tail_stretch(u: np.ndarray) -> np.ndarray:
    """The tail-only regression: +50% on the slowest 2% of requests, nothing below."""
    return np.where(u > 0.98, 1.5, 1.0)


def p99_stretch(u: np.ndarray) -> np.ndarray:
    """The +50% p99 regression: 1 below the p90, rising linearly to 1.5 at the p99 and above."""
    return 1 + 0.5 * np.clip((u - 0.90) / 0.09, 0, 1)


@dataclass
class TickData:
    """One simulated tick of R rollouts: counts per arm and latency samples (R, m)."""

    req_b: np.ndarray
    err_b: np.ndarray
    req_c: np.ndarray
    err_c: np.ndarray
    lat_b: np.ndarray
    lat_c: np.ndarray
    missing: np.ndarray | None = None  # rollouts whose metrics could not be read this tick


class Simulator:
    """R rollouts of one traffic class, optionally with a regression on the canary."""

    def __init__(
        self,
        cls: TrafficClass,
        *,
        rollouts: int = 1,
        seed: int = 0,
        regression: str | None | tuple[str | None, ...] = None,
        sample_cap: int = 250,
    ) -> None:
        """`regression`: one for every rollout, or a tuple of one per rollout (None: healthy)."""
        kinds = regression if isinstance(regression, tuple) else (regression,) * rollouts
        if len(kinds) != rollouts or any(k is not None and k not in REGRESSIONS for k in kinds):
            raise ValueError(f"unknown regression {regression!r} (or not one per rollout)")
        # Per rollout, which regression its canary carries.
        self.regressed = {k: np.array([x == k for x in kinds]) for k in REGRESSIONS}
        self.cls = cls
        self.rollouts = rollouts
        self.seed = seed
        self.regression = regression
        self.sample_cap = sample_cap
        rng = np.random.default_rng([seed, 7_777_777])
        shape = (MAX_TICKS, rollouts)
        self.phase = rng.uniform(0, 2 * np.pi, rollouts)
        self.burst = rng.random(shape) < cls.burst_prob
        storm = np.zeros(shape, dtype=bool)
        starts = rng.random(shape) < cls.storm_prob
        lengths = rng.integers(1, 5, shape)
        # A storm starting at tick s lasts lengths[s] ticks: tick t is stormy if a storm began
        # `span` ticks earlier and lasts longer than `span` (whole-array shifts, one per span).
        for span in range(4):
            storm[span:] |= starts[: MAX_TICKS - span] & (lengths[: MAX_TICKS - span] > span)
        self.storm = storm

    def with_regression(self, regression: str | None) -> Simulator:
        """The same streams (same seed) with another regression."""
        return Simulator(
            self.cls,
            rollouts=self.rollouts,
            seed=self.seed,
            regression=regression,
            sample_cap=self.sample_cap,
        )

    def samples_per_arm(self, weight: float) -> tuple[int, int]:
        """Latency samples per arm: a reservoir of at most `sample_cap` of the nominal requests."""
        n_c = int(min(self.sample_cap, self.cls.volume * weight / 100.0))
        n_b = int(min(self.sample_cap, self.cls.volume * (100.0 - weight) / 100.0))
        return n_b, n_c

    def tick(self, t: int, weight: float) -> TickData:
        """Simulate tick t (0-based) with `weight` percent of traffic on the canary."""
        cls, r = self.cls, self.rollouts
        rng = np.random.default_rng([self.seed, t])
        ti = min(t, MAX_TICKS - 1)
        load = 1 + cls.diurnal_amplitude * np.sin(2 * np.pi * t / 60 + self.phase)
        burst = self.burst[ti]
        storm = self.storm[ti]
        volume = cls.volume * load * np.where(burst, 3.0, 1.0)
        if cls.zero_traffic_prob > 0:
            volume = np.where(rng.random(r) < cls.zero_traffic_prob, 0.0, volume)
        err_p = cls.error_rate * (0.5 + 0.5 * load) * np.where(burst, 4.0, 1.0)
        lat_scale = (1 + 0.25 * (load - 1)) * np.where(burst, 1.5, 1.0) * np.where(storm, 1.3, 1.0)
        w = weight / 100.0
        req_c = rng.poisson(volume * w)
        req_b = rng.poisson(volume * (1 - w))
        p_b = err_p * np.exp(
            cls.baseline_noise * rng.standard_normal(r) - cls.baseline_noise**2 / 2
        )
        p_c = err_p.copy()
        warm = cls.warmup_ticks > 0
        if warm:
            p_c = p_c * (1 + 2.0 * np.exp(-t / cls.warmup_ticks))
        if self.regressed["errors"].any():
            p_c = p_c * np.where(self.regressed["errors"], 2.0, 1.0)
        err_b = self._errors(rng, req_b, p_b, storm)
        err_c = self._errors(rng, req_c, p_c, storm)
        m_b, m_c = self.samples_per_arm(weight)
        scale_b = lat_scale * np.exp(cls.baseline_latency_noise * rng.standard_normal(r))
        scale_c = lat_scale * (1 + (1.0 * np.exp(-t / cls.warmup_ticks) if warm else 0.0))
        z_b = rng.standard_normal((r, m_b))
        z_c = rng.standard_normal((r, m_c))
        lat_b = latency_from_normal(cls, z_b)
        lat_b *= scale_b[:, None]
        lat_c = latency_from_normal(cls, z_c)
        lat_c *= np.asarray(scale_c)[..., None]
        if self.regressed["latency_median"].any():
            lat_c *= np.where(self.regressed["latency_median"], 1.25, 1.0)[:, None]
        for kind in ("latency_p99", "latency_tail"):
            rows = self.regressed[kind]
            if rows.any():
                lat_c[rows] *= stretch_from_normal(kind, z_c[rows])
        first, length = cls.outage
        missing = np.full(r, first <= t < first + length)
        return TickData(
            req_b.astype(float),
            err_b.astype(float),
            req_c.astype(float),
            err_c.astype(float),
            lat_b,
            lat_c,
            missing,
        )

    def _errors(self, rng, requests: np.ndarray, p: np.ndarray, storm: np.ndarray) -> np.ndarray:
        """Errors of one arm; in a retry storm failed calls come back as clumps of retried errors."""
        cls = self.cls
        p_storm = np.minimum(p * np.where(storm, cls.storm_error_factor, 1.0), 0.5)
        if not storm.any():
            return rng.binomial(requests, np.minimum(p, 1.0))
        # Calls that fail in a storm are retried: each failed call becomes a clump of
        # errors (geometric size with mean storm_clump_mean) in the same arm.
        calls = rng.binomial(requests, np.where(storm, p_storm / cls.storm_clump_mean, p))
        extra = rng.negative_binomial(np.maximum(calls, 1), 1 / cls.storm_clump_mean)
        clumped = calls + np.where(calls > 0, extra, 0)
        errors = np.where(storm, clumped, calls)
        return np.minimum(errors, requests)

    def nominal(self) -> dict[str, float]:
        """The class's nominal error rate, median and p99 (what an operator tunes thresholds on)."""
        return {
            "error_rate": self.cls.error_rate,
            "p50_ms": float(latency_quantile(self.cls, np.array([0.5]))[0]),
            "p99_ms": float(latency_quantile(self.cls, np.array([0.99]))[0]),
        }


def with_volume(cls: TrafficClass, volume: float) -> TrafficClass:
    """A copy of the class at another traffic volume."""
    return replace(cls, volume=volume)
