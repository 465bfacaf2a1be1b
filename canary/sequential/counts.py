"""The arithmetic of one channel: event counts per tick, their log-likelihood ratio, dispersion.

Every channel is a conditional binomial: in a tick the baseline had population
n_b, the canary n_c, k events happened in both arms together and c of them on the
canary. Under H0 (the canary's event rate equals the baseline's) each event lands
on the canary with probability pi0 = n_c / (n_b + n_c); under H1 (its rate is rho
times the baseline's) with pi1 = rho n_c / (rho n_c + n_b).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class TickCounts:
    """Arrays (one entry per rollout) of one channel's counts in one tick."""

    n_b: np.ndarray  # baseline population (requests or latency samples)
    n_c: np.ndarray  # canary population
    k: np.ndarray  # events in both arms
    c: np.ndarray  # events on the canary


def zero_counts(rows: int) -> TickCounts:
    """A tick that carries no evidence (no traffic, no metrics)."""
    z = np.zeros(rows)
    return TickCounts(z, z.copy(), z.copy(), z.copy())


def error_counts(req_b, err_b, req_c, err_c) -> TickCounts:
    """Errors: events are failed requests; the populations are the requests of each arm."""
    req_b, err_b, req_c, err_c = (np.asarray(a, dtype=float) for a in (req_b, err_b, req_c, err_c))
    return TickCounts(req_b, req_c, err_b + err_c, err_c)


def latency_counts(lat_b: np.ndarray, lat_c: np.ndarray, quantile: float) -> TickCounts:
    """Latency rank counts for samples of shape (R, m_b) and (R, m_c).

    Events are the k = round((1 - quantile) * N) slowest of the N = m_b + m_c pooled
    samples; c counts how many of them came from the canary. Samples tied at the
    threshold (bucketed latencies) share the remaining slots in proportion, so ties
    favour neither arm. The threshold depends on the pooled sample only, never on
    which arm a sample came from, so under H0 c is hypergeometric whatever the
    latency distribution (no moment, no outlier enters).
    """
    lat_b = np.atleast_2d(np.asarray(lat_b, dtype=float))
    lat_c = np.atleast_2d(np.asarray(lat_c, dtype=float))
    rows = lat_b.shape[0]
    m_b, m_c = lat_b.shape[1], lat_c.shape[1]
    n = m_b + m_c
    k = int(round((1.0 - quantile) * n)) if m_b and m_c else 0
    n_b = np.full(rows, float(m_b))
    n_c = np.full(rows, float(m_c))
    if k <= 0:
        zero = np.zeros(rows)
        return TickCounts(n_b, n_c, zero, zero.copy())
    pooled = np.concatenate([lat_b, lat_c], axis=1)
    thr = np.partition(pooled, n - k, axis=1)[:, n - k][:, None]
    above_c = (lat_c > thr).sum(axis=1)
    above = above_c + (lat_b > thr).sum(axis=1)
    tied_c = (lat_c == thr).sum(axis=1)
    tied = tied_c + (lat_b == thr).sum(axis=1)
    # Samples tied at the threshold (histogram buckets) fill the remaining slots pro rata.
    c = above_c + (k - above) * tied_c / np.maximum(tied, 1)
    return TickCounts(n_b, n_c, np.full(rows, float(k)), c.astype(float))


def share(rho: np.ndarray | float, n_b: np.ndarray, n_c: np.ndarray) -> np.ndarray:
    """Probability that an event lands on the canary when its rate is rho times the baseline's."""
    return rho * n_c / np.maximum(rho * n_c + n_b, 1e-300)


def valid(t: TickCounts) -> np.ndarray:
    """Rows whose tick carries evidence: both arms populated and at least one event."""
    return (t.n_b > 0) & (t.n_c > 0) & (t.k > 0)


def fpc(t: TickCounts) -> np.ndarray:
    """Finite-population correction (N - k)/(N - 1): exact for rank counts, ~1 for errors."""
    n = t.n_b + t.n_c
    return np.clip((n - t.k) / np.maximum(n - 1, 1), 1e-3, 1.0)


def tick_llr(t: TickCounts, rho: float) -> np.ndarray:
    """Conditional-binomial log-likelihood ratio (ratio rho vs 1) of one tick, fpc-corrected.

    llr = [c log(pi1/pi0) + (k - c) log((1 - pi1)/(1 - pi0))] / fpc; 0 for a tick
    without evidence.
    """
    ok = valid(t)
    pi0 = np.where(ok, share(1.0, t.n_b, t.n_c), 0.5)
    pi1 = np.where(ok, share(rho, t.n_b, t.n_c), 0.5)
    llr = t.c * np.log(pi1 / pi0) + (t.k - t.c) * np.log((1 - pi1) / (1 - pi0))
    return np.where(ok, llr / fpc(t), 0.0)


def h0_drift(n_b: np.ndarray, n_c: np.ndarray, k: np.ndarray, rho: float) -> np.ndarray:
    """Expected decrease of the llr per tick if the canary is as good as the baseline (>= 0).

    E_H0[llr] = -k KL(pi0 || pi1) / fpc: the information a tick of this size carries
    towards the accept bound.
    """
    ok = (n_b > 0) & (n_c > 0) & (k > 0)
    pi0 = np.where(ok, share(1.0, n_b, n_c), 0.5)
    pi1 = np.where(ok, share(rho, n_b, n_c), 0.5)
    kl = pi0 * np.log(pi0 / pi1) + (1 - pi0) * np.log((1 - pi0) / (1 - pi1))
    n = n_b + n_c
    f = np.clip((n - k) / np.maximum(n - 1, 1), 1e-3, 1.0)
    return np.where(ok, k * kl / f, 0.0)


def surge(history: list[TickCounts], reference: list[np.ndarray]) -> np.ndarray:
    """Per tick, how far the event rate of both arms stands above its usual level (>= 1).

    The usual level is the lower quartile of the traffic-wide rate over every tick
    seen, warm-up included, so a surge cannot set its own reference.
    """
    k = np.array([h.k for h in history])
    n = np.array([h.n_b + h.n_c for h in history])
    rate = k / np.maximum(n, 1)
    typical = np.quantile(np.array(reference), 0.25, axis=0)
    return np.maximum(1.0, rate / np.maximum(typical, 1e-12))


def dispersion(
    history: list[TickCounts], prior: float, prior_ticks: float, temper: np.ndarray
) -> np.ndarray:
    """Pearson dispersion phi >= 1 of the canary's event share around the fitted rate ratio.

    phi = max(1, (df * sum r_t^2 + m) / (sum v_t + m)) with r_t = c_t - k_t pi_hat_t,
    v_t = k_t pi_hat_t (1 - pi_hat_t) fpc_t, df = T/(T - 2) over T ticks (the mean of
    an inverse chi-square: an estimate from few ticks is too often low) and a prior
    m = max(prior, prior_ticks * mean v_t) of pseudo-variance at phi = 1, so one noisy
    early tick cannot swing phi whatever the traffic volume. An infinite `prior` pins
    phi at 1: the textbook, binomial SPRT.
    """
    if math.isinf(prior):
        return np.ones_like(history[-1].c)
    c = np.array([h.c for h in history])
    k = np.array([h.k for h in history])
    n_b = np.array([h.n_b for h in history])
    n_c = np.array([h.n_c for h in history])
    ok = (n_b > 0) & (n_c > 0) & (k > 0)
    f = np.array([fpc(h) for h in history])
    rate_c = (np.where(ok, c, 0).sum(0) + 0.5) / (np.where(ok, n_c, 0).sum(0) + 1.0)
    rate_b = (np.where(ok, k - c, 0).sum(0) + 0.5) / (np.where(ok, n_b, 0).sum(0) + 1.0)
    rho_hat = rate_c / rate_b
    pi = share(rho_hat[None, :], n_b, n_c)
    dev2 = np.where(ok, (c - k * pi) ** 2 / temper, 0.0).sum(0)
    var = np.where(ok, k * pi * (1 - pi) * f, 0.0).sum(0)
    ticks = ok.sum(0)
    df = np.where(ticks >= 3, ticks / np.maximum(ticks - 2, 1), 1.0)
    m = np.maximum(prior, prior_ticks * var / np.maximum(ticks, 1))
    return np.maximum(1.0, (dev2 * df + m) / (var + m))
