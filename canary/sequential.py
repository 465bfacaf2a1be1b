"""Sequential canary analysis: Wald's SPRT on errors, CUSUM on latency, canary against baseline.

Pure and deterministic (numpy only, no Django). `Analyzer(AnalysisConfig(...))`
judges one rollout tick by tick; `BatchAnalyzer` runs the very same arithmetic
over many rollouts at once (the benchmark). Each tick brings one `Window` per arm
(requests, errors, a sample of request latencies in ms) and returns a
`Decision`: continue, promote or rollback, with the statistics behind it.

Every test is *conditional on the traffic split*, never on an absolute rate.
In a tick the baseline served n_b requests and the canary n_c, and k "events"
happened in total (errors; or requests slower than a pooled latency quantile),
c of them on the canary. If the canary is as good as the baseline, each event
lands on the canary with probability pi0 = n_c / (n_b + n_c), whatever the
traffic-wide rate is: a burst that hits both arms raises k, not the canary's
share, so it cancels out. If the canary's event rate is rho times the
baseline's, pi1 = rho n_c / (rho n_c + n_b). Per tick the log-likelihood ratio
of H1 (rate ratio rho) against H0 (ratio 1) is

    llr_t = [c log(pi1/pi0) + (k - c) log((1 - pi1)/(1 - pi0))] / fpc_t

with the finite-population correction fpc_t = (N - k)/(N - 1) (k of N requests are
events: exact for the latency quantile counts, ~1 for errors).

Overdispersion (retry storms, where one failing call is retried into a clump
of errors in one arm; a noisy baseline whose rate wobbles tick to tick) makes
c vary more than binomially. Kiln does not pretend otherwise: it estimates the
dispersion phi with Pearson residuals around the fitted rate ratio rho_hat,
pooled over all ticks so far and weighted by information,

    phi = max(1, (T/(T-2) sum (c_t - k_t pi_hat_t)^2 + m0) / (sum k_t pi_hat_t (1 - pi_hat_t) fpc_t + m0))

(m0 = `dispersion_prior` pseudo-variance anchoring phi at 1 early on; T/(T-2)
over T ticks, the mean of an inverse chi-square, because a dispersion estimated
from few ticks is too often too low, and too low is what causes false
rollbacks), and uses
the quasi-likelihood ratio LLR / phi. A tick whose clumped errors swing the
share also raises phi, so its own evidence is discounted.

Errors - Wald SPRT for rho_err = `error_ratio` (default 2, "errors x2") against 1,
with bounds A = log((1 - beta)/alpha) (roll back) and B = log(beta/(1 - alpha))
(accept: the error rate is not worse; the error test then stops, as Wald's
test does). Configured for alpha = 0.001, beta = 0.05. A tick in a traffic-wide
error surge (its error rate over both arms k_t/N_t above the lower quartile of
all ticks so far) has its llr divided by that surge factor: correlated failures
(retries, a dependency outage) are not independent events, so such a tick
counts no more than a tick at the usual error level (the same factor divides
its squared Pearson residual in phi).

Latency - Page's CUSUM S_t = max(0, S_{t-1} + llr_t) on two rank statistics
that heavy tails cannot fool, since they only count which arm the slow requests
came from (distribution-free under H0: no moment, no outlier enters):
  * median channel: events = requests above the pooled median of the tick's
    latency samples; design ratio `median_ratio` 1.3 (what a +25% shift of the
    median does to a log-normal body with sigma 0.5: 0.65 vs 0.5 above);
  * tail (p99) channel: events = requests above the pooled `tail_quantile`
    (0.95) latency; design ratio `tail_ratio` 1.4 (a +50% p99 stretch puts
    1.4-1.6x as many canary requests past the pooled p95, heavy tails included).
The reported value is S / phi of the channel; the alarm fires at
`cusum_threshold` h = 8.5. An excursion of a CUSUM of log-likelihood ratios
reaches h with probability at most e^-h (Wald's inequality); a union bound over
the 2 channels x 35 evidence ticks gives at most 1.4% per rollout, and in the
benchmark the observed rate is far below that (the bound counts every tick as
a fresh excursion).

`warmup_ticks` (5) first ticks are not used as evidence (caches, JIT). When
`horizon_ticks` ticks have passed without a rollback the canary is promoted: no
evidence of a regression at the designed sizes after the designed sample.
Assumptions: requests within a tick are exchangeable between the arms apart from
the version (the router splits at random); latency samples are a random sample
of each arm's requests; ticks are long enough that each arm sees requests.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

CONTINUE = "continue"
PROMOTE = "promote"
ROLLBACK = "rollback"

CHANNELS = ("errors", "median", "tail")


@dataclass(frozen=True)
class AnalysisConfig:
    """Error rates, design regression sizes and horizon of the sequential analysis."""

    alpha: float = 0.001  # false rollback rate of the error SPRT
    beta: float = 0.05  # missed-regression rate of the error SPRT at error_ratio
    error_ratio: float = 2.0  # canary error rate / baseline error rate to catch
    median_ratio: float = 1.3  # canary/baseline share above the pooled median (+25% median)
    tail_ratio: float = 1.4  # canary/baseline share above the pooled tail quantile (+50% p99)
    tail_quantile: float = 0.95
    cusum_threshold: float = 8.5
    dispersion_prior: float = 8.0
    warmup_ticks: int = 5
    horizon_ticks: int = 40

    def __post_init__(self) -> None:
        if not (0 < self.alpha < 0.5 and 0 < self.beta < 0.5):
            raise ValueError("alpha and beta must be in (0, 0.5)")
        if min(self.error_ratio, self.median_ratio, self.tail_ratio) <= 1:
            raise ValueError("design ratios must be greater than 1")
        if not 0.5 < self.tail_quantile < 1:
            raise ValueError("tail_quantile must be in (0.5, 1)")
        if self.cusum_threshold <= 0 or self.dispersion_prior < 0:
            raise ValueError("cusum_threshold must be positive, dispersion_prior non-negative")
        if self.warmup_ticks < 0 or self.horizon_ticks <= self.warmup_ticks:
            raise ValueError("horizon_ticks must exceed warmup_ticks")

    @property
    def upper(self) -> float:
        """Wald's upper bound A = log((1 - beta)/alpha): cross it and the canary rolls back."""
        return math.log((1 - self.beta) / self.alpha)

    @property
    def lower(self) -> float:
        """Wald's lower bound B = log(beta/(1 - alpha)): cross it and errors are accepted."""
        return math.log(self.beta / (1 - self.alpha))


@dataclass(frozen=True)
class Window:
    """One tick of one arm: requests served, errors among them, a sample of latencies (ms)."""

    requests: int
    errors: int
    latencies_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if self.requests < 0 or self.errors < 0 or self.errors > self.requests:
            raise ValueError("need 0 <= errors <= requests")
        lat = np.asarray(self.latencies_ms, dtype=float).ravel()
        if lat.size and (not np.all(np.isfinite(lat)) or lat.min() < 0):
            raise ValueError("latencies must be finite and non-negative")
        object.__setattr__(self, "latencies_ms", lat)


@dataclass(frozen=True)
class Decision:
    """The verdict of one tick and the statistics behind it."""

    action: str
    reason: str
    tick: int
    llr: float
    llr_lower: float
    llr_upper: float
    errors_accepted: bool
    cusum: float
    cusum_median: float
    cusum_tail: float
    cusum_threshold: float
    dispersion: dict[str, float]
    canary_error_rate: float
    baseline_error_rate: float
    canary_p50_ms: float | None
    baseline_p50_ms: float | None
    canary_p99_ms: float | None
    baseline_p99_ms: float | None

    def as_dict(self) -> dict:
        """JSON-ready form (audit data, API, websocket)."""
        return asdict(self)


# --- per-tick event counts ------------------------------------------------------------------


@dataclass
class TickCounts:
    """Arrays (one entry per rollout) of one channel's counts in one tick."""

    n_b: np.ndarray  # baseline population (requests or latency samples)
    n_c: np.ndarray  # canary population
    k: np.ndarray  # events in both arms
    c: np.ndarray  # events on the canary


def error_counts(req_b, err_b, req_c, err_c) -> TickCounts:
    """Errors: events are failed requests; the populations are the requests of each arm."""
    req_b, err_b, req_c, err_c = (np.asarray(a, dtype=float) for a in (req_b, err_b, req_c, err_c))
    return TickCounts(req_b, req_c, err_b + err_c, err_c)


def latency_counts(lat_b: np.ndarray, lat_c: np.ndarray, quantile: float) -> TickCounts:
    """Latency rank counts for samples of shape (R, m_b) and (R, m_c).

    Events are the k = round((1 - quantile) * N) slowest of the N = m_b + m_c pooled
    samples; c counts how many of them came from the canary. Samples tied at the
    threshold (bucketed latencies) share the remaining slots in proportion, so ties
    favour neither arm.
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


def _share(rho: np.ndarray | float, n_b: np.ndarray, n_c: np.ndarray) -> np.ndarray:
    """Probability that an event lands on the canary when its rate is rho times the baseline's."""
    return rho * n_c / np.maximum(rho * n_c + n_b, 1e-300)


def tick_llr(t: TickCounts, rho: float) -> np.ndarray:
    """Conditional-binomial log-likelihood ratio (ratio rho vs 1) of one tick, fpc-corrected."""
    valid = (t.n_b > 0) & (t.n_c > 0) & (t.k > 0)
    pi0 = np.where(valid, _share(1.0, t.n_b, t.n_c), 0.5)
    pi1 = np.where(valid, _share(rho, t.n_b, t.n_c), 0.5)
    llr = t.c * np.log(pi1 / pi0) + (t.k - t.c) * np.log((1 - pi1) / (1 - pi0))
    return np.where(valid, llr / _fpc(t), 0.0)


def _fpc(t: TickCounts) -> np.ndarray:
    n = t.n_b + t.n_c
    return np.clip((n - t.k) / np.maximum(n - 1, 1), 1e-3, 1.0)


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


def dispersion(history: list[TickCounts], prior: float, temper: np.ndarray) -> np.ndarray:
    """Pearson dispersion phi >= 1 of the canary's event share around the fitted rate ratio.

    An infinite `prior` pins phi at 1: the textbook, binomial SPRT.
    """
    if math.isinf(prior):
        return np.ones_like(history[-1].c)
    c = np.array([h.c for h in history])
    k = np.array([h.k for h in history])
    n_b = np.array([h.n_b for h in history])
    n_c = np.array([h.n_c for h in history])
    valid = (n_b > 0) & (n_c > 0) & (k > 0)
    fpc = np.array([_fpc(h) for h in history])
    rate_c = (np.where(valid, c, 0).sum(0) + 0.5) / (np.where(valid, n_c, 0).sum(0) + 1.0)
    rate_b = (np.where(valid, k - c, 0).sum(0) + 0.5) / (np.where(valid, n_b, 0).sum(0) + 1.0)
    rho_hat = rate_c / rate_b
    pi = _share(rho_hat[None, :], n_b, n_c)
    dev2 = np.where(valid, (c - k * pi) ** 2 / temper, 0.0).sum(0)
    var = np.where(valid, k * pi * (1 - pi) * fpc, 0.0).sum(0)
    # An estimate from T ticks is too often low: scale by T/(T - 2), the mean of an inverse chi-square.
    ticks = valid.sum(0)
    df = np.where(ticks >= 3, ticks / np.maximum(ticks - 2, 1), 1.0)
    return np.maximum(1.0, (dev2 * df + prior) / (var + prior))


# --- the engine --------------------------------------------------------------------------


class BatchAnalyzer:
    """The sequential analysis of R rollouts in lock-step (same arithmetic as `Analyzer`)."""

    def __init__(self, config: AnalysisConfig, rollouts: int) -> None:
        self.config = config
        self.rollouts = rollouts
        self.tick = 0
        self.history: dict[str, list[TickCounts]] = {ch: [] for ch in CHANNELS}
        self.error_rates: list[np.ndarray] = []
        self.llr_sum = np.zeros(rollouts)
        self.llr = np.zeros(rollouts)
        self.errors_accepted = np.zeros(rollouts, dtype=bool)
        self.cusum_raw = {ch: np.zeros(rollouts) for ch in ("median", "tail")}
        self.cusum = {ch: np.zeros(rollouts) for ch in ("median", "tail")}
        self.phi = {ch: np.ones(rollouts) for ch in CHANNELS}
        self.decided = np.zeros(rollouts, dtype=bool)

    def update_counts(
        self, errors: TickCounts, median: TickCounts, tail: TickCounts
    ) -> tuple[np.ndarray, np.ndarray]:
        """Advance one tick; return (action codes 0 continue/1 promote/2 rollback, reason codes)."""
        cfg = self.config
        self.tick += 1
        self.error_rates.append(errors.k / np.maximum(errors.n_b + errors.n_c, 1))
        actions = np.zeros(self.rollouts, dtype=np.int8)
        reasons = np.zeros(self.rollouts, dtype=np.int8)
        if self.tick <= cfg.warmup_ticks:
            return actions, reasons
        counts = {"errors": errors, "median": median, "tail": tail}
        for ch in CHANNELS:
            self.history[ch].append(counts[ch])
        temper = surge(self.history["errors"], self.error_rates)
        for ch in CHANNELS:
            t = temper if ch == "errors" else np.ones_like(temper)
            self.phi[ch] = dispersion(self.history[ch], cfg.dispersion_prior, t)
        # Errors: quasi-likelihood SPRT; it stops once it has accepted H0. A tick in a
        # traffic-wide error surge counts no more than a tick at the usual error level.
        open_ = ~self.errors_accepted
        llr_t = tick_llr(errors, cfg.error_ratio) / temper[-1]
        self.llr_sum = self.llr_sum + np.where(open_, llr_t, 0.0)
        self.llr = np.where(open_, self.llr_sum / self.phi["errors"], self.llr)
        self.errors_accepted |= open_ & (self.llr <= cfg.lower)
        # Latency: CUSUM of the rank statistics, scaled by their dispersion.
        for ch, rho in (("median", cfg.median_ratio), ("tail", cfg.tail_ratio)):
            self.cusum_raw[ch] = np.maximum(0.0, self.cusum_raw[ch] + tick_llr(counts[ch], rho))
            self.cusum[ch] = self.cusum_raw[ch] / self.phi[ch]
        err_alarm = self.llr >= cfg.upper
        med_alarm = self.cusum["median"] >= cfg.cusum_threshold
        tail_alarm = self.cusum["tail"] >= cfg.cusum_threshold
        rollback = ~self.decided & (err_alarm | med_alarm | tail_alarm)
        reasons = np.where(
            rollback, np.where(err_alarm, 1, np.where(med_alarm, 2, 3)), reasons
        ).astype(np.int8)
        promote = ~self.decided & ~rollback & (self.tick >= cfg.horizon_ticks)
        reasons = np.where(promote, 4, reasons).astype(np.int8)
        actions = np.where(rollback, 2, np.where(promote, 1, 0)).astype(np.int8)
        self.decided |= rollback | promote
        return actions, reasons


REASONS = {
    0: "collecting evidence",
    1: "canary error rate exceeds the baseline's (SPRT upper bound crossed)",
    2: "canary median latency exceeds the baseline's (CUSUM threshold crossed)",
    3: "canary tail latency (p99) exceeds the baseline's (CUSUM threshold crossed)",
    4: "horizon reached without evidence of a regression",
}
ACTIONS = {0: CONTINUE, 1: PROMOTE, 2: ROLLBACK}


def _quantile(values: np.ndarray, q: float) -> float | None:
    return float(np.quantile(values, q)) if values.size else None


@dataclass(frozen=True)
class Evidence:
    """What one tick contributes, as plain numbers: stored per tick so an analysis can be replayed."""

    errors: tuple[float, float, float, float]  # n_b, n_c, k, c
    median: tuple[float, float, float, float]
    tail: tuple[float, float, float, float]
    canary_error_rate: float = 0.0
    baseline_error_rate: float = 0.0
    canary_p50_ms: float | None = None
    baseline_p50_ms: float | None = None
    canary_p99_ms: float | None = None
    baseline_p99_ms: float | None = None

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Evidence:
        """Inverse of `as_dict`."""
        fields = dict(data)
        for ch in CHANNELS:
            fields[ch] = tuple(float(v) for v in fields[ch])
        return cls(**fields)


def _as_tuple(t: TickCounts) -> tuple[float, float, float, float]:
    return (float(t.n_b[0]), float(t.n_c[0]), float(t.k[0]), float(t.c[0]))


def _as_counts(values: tuple[float, float, float, float]) -> TickCounts:
    return TickCounts(*(np.array([v], dtype=float) for v in values))


def evidence(baseline: Window, canary: Window, config: AnalysisConfig) -> Evidence:
    """Reduce one tick of both arms to the counts the analysis needs."""
    b_lat = baseline.latencies_ms[None, :]
    c_lat = canary.latencies_ms[None, :]
    return Evidence(
        errors=_as_tuple(
            error_counts([baseline.requests], [baseline.errors], [canary.requests], [canary.errors])
        ),
        median=_as_tuple(latency_counts(b_lat, c_lat, 0.5)),
        tail=_as_tuple(latency_counts(b_lat, c_lat, config.tail_quantile)),
        canary_error_rate=canary.errors / canary.requests if canary.requests else 0.0,
        baseline_error_rate=baseline.errors / baseline.requests if baseline.requests else 0.0,
        canary_p50_ms=_quantile(canary.latencies_ms, 0.5),
        baseline_p50_ms=_quantile(baseline.latencies_ms, 0.5),
        canary_p99_ms=_quantile(canary.latencies_ms, 0.99),
        baseline_p99_ms=_quantile(baseline.latencies_ms, 0.99),
    )


class Analyzer:
    """Sequential analysis of one rollout: `update(baseline, canary) -> Decision` per tick."""

    def __init__(self, config: AnalysisConfig | None = None) -> None:
        self.config = config or AnalysisConfig()
        self._batch = BatchAnalyzer(self.config, 1)
        self.final: Decision | None = None

    @property
    def tick(self) -> int:
        return self._batch.tick

    def update(self, baseline: Window, canary: Window) -> Decision:
        """Add one tick of both arms and decide; after a final decision it is repeated."""
        return self.observe(evidence(baseline, canary, self.config))

    def replay(self, history: list[Evidence]) -> Decision | None:
        """Feed stored evidence in order (a restarted worker rebuilds its state); last decision."""
        decision = None
        for item in history:
            decision = self.observe(item)
        return decision

    def observe(self, ev: Evidence) -> Decision:
        """Add one tick's evidence and decide."""
        if self.final is not None:
            return self.final
        cfg = self.config
        actions, reasons = self._batch.update_counts(
            _as_counts(ev.errors), _as_counts(ev.median), _as_counts(ev.tail)
        )
        b = self._batch
        reason = REASONS[int(reasons[0])]
        if b.tick <= cfg.warmup_ticks:
            reason = f"warm-up tick {b.tick} of {cfg.warmup_ticks}: not used as evidence"
        decision = Decision(
            action=ACTIONS[int(actions[0])],
            reason=reason,
            tick=b.tick,
            llr=float(b.llr[0]),
            llr_lower=cfg.lower,
            llr_upper=cfg.upper,
            errors_accepted=bool(b.errors_accepted[0]),
            cusum=float(max(b.cusum["median"][0], b.cusum["tail"][0])),
            cusum_median=float(b.cusum["median"][0]),
            cusum_tail=float(b.cusum["tail"][0]),
            cusum_threshold=cfg.cusum_threshold,
            dispersion={ch: float(b.phi[ch][0]) for ch in CHANNELS},
            canary_error_rate=ev.canary_error_rate,
            baseline_error_rate=ev.baseline_error_rate,
            canary_p50_ms=ev.canary_p50_ms,
            baseline_p50_ms=ev.baseline_p50_ms,
            canary_p99_ms=ev.canary_p99_ms,
            baseline_p99_ms=ev.baseline_p99_ms,
        )
        if decision.action != CONTINUE:
            self.final = decision
        return decision
