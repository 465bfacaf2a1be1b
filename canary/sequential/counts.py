"""The arithmetic of one channel: event counts per tick, their log-likelihood ratio, dispersion.

Every channel is a conditional binomial: in a tick the baseline had population
n_b, the canary n_c, k events happened in both arms together and c of them on the
canary. Under H0 (the canary's event rate equals the baseline's) each event lands
on the canary with probability pi0 = n_c / (n_b + n_c); under H1 (its rate is rho
times the baseline's) with pi1 = rho n_c / (rho n_c + n_b).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

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
    return rank_counts(lat_b, lat_c, (quantile,))[0]


def rank_counts(lat_b: np.ndarray, lat_c: np.ndarray, quantiles: tuple[float, ...]) -> list:
    """`latency_counts` for several pooled quantiles at once (one pooled partition for all)."""
    lat_b = np.atleast_2d(np.asarray(lat_b, dtype=float))
    lat_c = np.atleast_2d(np.asarray(lat_c, dtype=float))
    rows = lat_b.shape[0]
    m_b, m_c = lat_b.shape[1], lat_c.shape[1]
    n = m_b + m_c
    n_b = np.full(rows, float(m_b))
    n_c = np.full(rows, float(m_c))
    ks = [int(round((1.0 - q) * n)) if m_b and m_c else 0 for q in quantiles]
    kth = sorted({n - k for k in ks if k > 0})
    part = None
    if kth:
        part = np.concatenate([lat_b, lat_c], axis=1)  # a fresh array: partitioned in place
        part.partition(kth, axis=1)
    out = []
    for k in ks:
        if k <= 0:
            zero = np.zeros(rows)
            out.append(TickCounts(n_b, n_c, zero, zero.copy()))
            continue
        thr = part[:, n - k][:, None]
        above_c = (lat_c > thr).sum(axis=1)
        above = above_c + (lat_b > thr).sum(axis=1)
        tied_c = (lat_c == thr).sum(axis=1)
        tied = tied_c + (lat_b == thr).sum(axis=1)
        # Samples tied at the threshold (histogram buckets) fill the remaining slots pro rata.
        c = above_c + (k - above) * tied_c / np.maximum(tied, 1)
        out.append(TickCounts(n_b, n_c, np.full(rows, float(k)), c.astype(float)))
    return out


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


class History:
    """One channel's counts over the ticks with evidence so far, as (T, R) arrays (grown in place)."""

    def __init__(self, rows: int, capacity: int = 32) -> None:
        self.ticks = 0
        self._data = np.zeros((5, max(capacity, 1), rows))  # n_b, n_c, k, c, fpc

    def append(self, t: TickCounts) -> None:
        if self.ticks == self._data.shape[1]:
            grown = np.zeros((5, 2 * self.ticks, self._data.shape[2]))
            grown[:, : self.ticks] = self._data
            self._data = grown
        self._data[:, self.ticks] = (t.n_b, t.n_c, t.k, t.c, fpc(t))
        self.ticks += 1

    def keep(self, rows: np.ndarray) -> None:
        """Forget every rollout but `rows` (an index or mask)."""
        self._data = self._data[:, :, rows]

    def arrays(self) -> tuple[np.ndarray, ...]:
        """(n_b, n_c, k, c, fpc), each (T, R)."""
        return tuple(self._data[:, : self.ticks])


def surge(history: list[TickCounts] | History, reference: list[np.ndarray]) -> np.ndarray:
    """Per tick, how far the event rate of both arms stands above its usual level (>= 1).

    The usual level is the lower quartile of the traffic-wide rate over every tick
    seen with evidence, warm-up included, so a surge cannot set its own reference
    (`reference` holds NaN for the ticks without evidence: they are left out).
    """
    n_b, n_c, k, _, _ = _stacked(history)
    rate = k / np.maximum(n_b + n_c, 1)
    typical = lower_quartile(np.array(reference))
    return np.maximum(1.0, rate / np.maximum(typical, 1e-12))


def lower_quartile(values: np.ndarray) -> np.ndarray:
    """Per column of (T, R) `values`, the 0.25 quantile of its non-NaN entries (0 if none).

    Linear interpolation between order statistics, as `np.quantile` does by default.
    """
    srt = np.sort(np.where(np.isnan(values), np.inf, values), axis=0)
    n = (~np.isnan(values)).sum(axis=0)
    pos = 0.25 * np.maximum(n - 1, 0)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    cols = np.arange(values.shape[1])
    a, b = srt[lo, cols], srt[hi, cols]
    with np.errstate(invalid="ignore"):  # columns without a value: inf - inf, masked below
        out = a + (pos - lo) * np.where(hi > lo, b - a, 0.0)
    return np.where(n > 0, out, 0.0)


def _stacked(history: list[TickCounts] | History) -> tuple[np.ndarray, ...]:
    if isinstance(history, History):
        return history.arrays()
    fields = [np.array([getattr(h, f) for h in history]) for f in ("n_b", "n_c", "k", "c")]
    return (*fields, np.array([fpc(h) for h in history]))


def chi2_quantile(df: np.ndarray, p: float | np.ndarray) -> np.ndarray:
    """The p-quantile of chi-square with `df` degrees of freedom (Wilson-Hilferty; df >= 2)."""
    if np.ndim(p):
        levels, where = np.unique(np.asarray(p, dtype=float), return_inverse=True)
        z = np.array([NormalDist().inv_cdf(float(v)) for v in levels])[where.ravel()]
    else:
        z = NormalDist().inv_cdf(float(p))
    h = 2.0 / (9.0 * np.maximum(df, 1e-9))
    return df * np.maximum(1.0 - h + z * np.sqrt(h), 1e-3) ** 3


def dispersion(
    history: list[TickCounts] | History, prior: float, prior_ticks: float, temper: np.ndarray
) -> np.ndarray:
    """The point estimate of `dispersion_bounds`."""
    return dispersion_bounds(history, prior, prior_ticks, temper, 0.5)[0]


def dispersion_bounds(
    history: list[TickCounts] | History,
    prior: float | np.ndarray,
    prior_ticks: float | np.ndarray,
    temper: np.ndarray,
    confidence: float | np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Pearson dispersion phi >= 1 of the canary's event share around the fitted rate ratio.

    phi = max(1, (df * sum r_t^2 + m) / (sum v_t + m)) with r_t = c_t - k_t pi_hat_t,
    v_t = k_t pi_hat_t (1 - pi_hat_t) fpc_t, df = T/(T - 2) over T ticks (the mean of
    an inverse chi-square: an estimate from few ticks is too often low) and a prior
    m = max(prior, prior_ticks * mean v_t) of pseudo-variance at phi = 1, so one noisy
    early tick cannot swing phi whatever the traffic volume. An infinite `prior` pins
    phi at 1: the textbook, binomial SPRT.

    Returns (phi, phi_up): phi_up is the upper `confidence` bound of phi (at least the
    point estimate): the Pearson sum is phi times a chi-square of T + prior_ticks degrees of
    freedom (the prior counted as pseudo-ticks), so
    phi_up = (T + prior_ticks) s^2 / chi2_{T + prior_ticks}(1 - confidence) with
    s^2 = (sum r_t^2 + m) / (sum v_t + m). Alarms divide by it: with a handful of ticks
    the data cannot rule out a dispersion several times the binomial one (a baseline
    whose own latency or error rate wobbles from tick to tick), and a rollback claims
    evidence of a regression at every dispersion the data leave plausible.
    """
    n_b, n_c, k, c, f = _stacked(history)
    pinned = np.isinf(prior)
    if np.all(pinned):
        return np.ones_like(c[-1]), np.ones_like(c[-1])
    prior = np.where(pinned, 0.0, prior)
    ok = (n_b > 0) & (n_c > 0) & (k > 0)
    rate_c = (np.where(ok, c, 0).sum(0) + 0.5) / (np.where(ok, n_c, 0).sum(0) + 1.0)
    rate_b = (np.where(ok, k - c, 0).sum(0) + 0.5) / (np.where(ok, n_b, 0).sum(0) + 1.0)
    rho_hat = rate_c / rate_b
    pi = share(rho_hat[None, :], n_b, n_c)
    dev2 = np.where(ok, (c - k * pi) ** 2 / temper, 0.0).sum(0)
    var = np.where(ok, k * pi * (1 - pi) * f, 0.0).sum(0)
    ticks = ok.sum(0)
    df = np.where(ticks >= 3, ticks / np.maximum(ticks - 2, 1), 1.0)
    m = np.maximum(prior, prior_ticks * var / np.maximum(ticks, 1))
    # No variance and no prior (a prior of 0 before any error was seen): no evidence of
    # overdispersion, so the binomial's 1, not 0/0.
    spread = var + m
    known = spread > 0
    safe = np.where(known, spread, 1.0)
    phi = np.where(known, np.maximum(1.0, (dev2 * df + m) / safe), 1.0)
    # Fewer than 2 degrees of freedom (no prior, one tick) are bounded as if they were 2.
    nu = np.maximum(ticks + prior_ticks, 2.0)
    upper = np.where(
        known, nu * (dev2 + m) / safe / chi2_quantile(nu, 1.0 - np.asarray(confidence)), 1.0
    )
    upper = np.where(ticks > 0, np.maximum(phi, upper), phi)
    return np.where(pinned, 1.0, phi), np.where(pinned, 1.0, upper)
