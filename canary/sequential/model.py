"""What goes in and out of the analysis: its configuration, one tick's windows, the evidence, a decision."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

CONTINUE = "continue"
PROMOTE = "promote"
ROLLBACK = "rollback"
INCONCLUSIVE = "inconclusive"

CHANNELS = ("errors", "median", "tail")


class ConfigError(ValueError):
    """An impossible analysis setting; `field` names the setting at fault. Raised for the first
    of a configuration's problems, with all of them in `problems`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.problems: list[ConfigError] = [self]


# The largest settings a new rollout may override: beyond them a share or a bound can
# overflow (a ratio of 1e308 makes rho * n infinite), and no rollout needs them (a design ratio
# of 1,000 catches only a canary a thousand times worse). `override_problems` applies them to
# what a rollout is created with, not to every AnalysisConfig: one stored before they were set
# goes on as it was.
MAX_RATIO = 1_000.0
MAX_CUSUM_THRESHOLD = 1e6
MAX_DISPERSION = 1e6
OVERRIDE_LIMITS: dict[str, tuple[float, str]] = {
    **{n: (MAX_RATIO, "a design ratio") for n in ("error_ratio", "median_ratio", "tail_ratio")},
    **{n: (MAX_RATIO, "a design shift") for n in ("median_shift", "tail_shift")},
    "cusum_threshold": (MAX_CUSUM_THRESHOLD, "the CUSUM threshold"),
    "dispersion_prior": (MAX_DISPERSION, "a finite dispersion prior"),
    "dispersion_ticks": (MAX_DISPERSION, "the dispersion's pseudo-ticks"),
}
MIN_ERROR_RATE = 1e-12  # the smallest alpha or beta: far below any rate a rollout can show


@dataclass(frozen=True)
class AnalysisConfig:
    """Error rates, design regression sizes and durations of the sequential analysis.

    Durations are in ticks (analysis intervals of `tick_seconds`). The analysis
    runs at least `horizon_ticks` (the rollout's planned steps) unless it decides
    earlier, extends itself while a decision is in reach, and never runs past
    `max_ticks`: undecided by then it is inconclusive.
    """

    alpha: float = 0.001  # false rollback rate of the error SPRT
    beta: float = 0.05  # chance to promote a canary that is worse by a design ratio (per channel)
    error_ratio: float = 2.0  # canary error rate / baseline error rate to catch
    median_ratio: float = 1.3  # canary/baseline share above the pooled median (+25% median)
    tail_ratio: float = 1.5  # canary/baseline share above the pooled tail quantile
    tail_quantile: float = 0.995  # the tail channel counts requests above the pooled p99.5
    # The latency shifts the latency design ratios stand for (+25% at the median, +50% in the
    # tail): a histogram bucket that can hold a request and the same request this much slower
    # cannot tell them apart, and such a channel is never accepted (`resolution.py`).
    median_shift: float = 1.25
    tail_shift: float = 1.5
    cusum_threshold: float = 9.0
    dispersion_prior: float = 8.0  # pseudo-variance anchoring the dispersion at 1 early on
    dispersion_ticks: float = 8.0  # ... and at least this many pseudo-ticks of it
    alarm_confidence: float = 0.99  # rollback alarms use this upper confidence bound of phi
    warmup_ticks: int = 5
    horizon_ticks: int = 40
    max_ticks: int = 120  # max duration: undecided here, the rollout is inconclusive
    max_empty_share: float = 0.5  # more windows than this without evidence: inconclusive
    tick_seconds: float = 60.0  # only for the minutes in the sample-size estimate

    def __post_init__(self) -> None:
        problems = config_problems(self)
        if problems:
            first = problems[0]
            first.problems = problems  # every one, for a form to name them all at once
            raise first

    @property
    def upper(self) -> float:
        """Wald's upper bound A = log((1 - beta)/alpha): cross it and the canary rolls back."""
        return math.log((1 - self.beta) / self.alpha)

    @property
    def lower(self) -> float:
        """Wald's lower bound B = log(beta/(1 - alpha)): cross it and the channel is accepted."""
        return math.log(self.beta / (1 - self.alpha))

    def ratio(self, channel: str) -> float:
        """The design ratio of one channel."""
        return {
            "errors": self.error_ratio,
            "median": self.median_ratio,
            "tail": self.tail_ratio,
        }[channel]

    def shift(self, channel: str) -> float:
        """The latency factor a latency channel's design ratio stands for."""
        return {"median": self.median_shift, "tail": self.tail_shift}[channel]


@dataclass(frozen=True)
class Window:
    """One tick of one arm: requests served, errors among them, a sample of latencies (ms).

    `bounds_ms`: the finite upper bounds of the histogram buckets the latencies were read
    from (each sample sits at its bucket's bound, the overflow bucket above the last
    one); None for raw samples. A latency channel judged from buckets carries their
    resolution (`resolution.py`).
    """

    requests: int
    errors: int
    latencies_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bounds_ms: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.requests < 0 or self.errors < 0 or self.errors > self.requests:
            raise ValueError("need 0 <= errors <= requests")
        lat = np.asarray(self.latencies_ms, dtype=float).ravel()
        if lat.size and (not np.all(np.isfinite(lat)) or lat.min() < 0):
            raise ValueError("latencies must be finite and non-negative")
        object.__setattr__(self, "latencies_ms", lat)
        if self.bounds_ms is not None:
            bounds = sorted({float(b) for b in self.bounds_ms})
            if not bounds or not all(math.isfinite(b) and b > 0 for b in bounds):
                raise ValueError("bucket bounds must be finite and positive")
            object.__setattr__(self, "bounds_ms", tuple(bounds))


@dataclass(frozen=True)
class Decision:
    """The verdict of one tick and the statistics behind it.

    `llr` is the error SPRT's (kept for readers of earlier decisions); `channels`
    holds, per channel, the SPRT log-likelihood ratio, whether it crossed its
    accept bound, its CUSUM (latency) and the requests, ticks and minutes still
    needed to accept it if the canary is as good as the baseline.
    """

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
    channels: dict[str, dict] = field(default_factory=dict)
    alarm_dispersion: dict[str, float] = field(default_factory=dict)
    requests_needed: float | None = None
    minutes_needed: float | None = None
    empty_ticks: int = 0
    max_ticks: int = 0
    settle: str = ""
    resolution: dict[str, dict] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """JSON-ready form (audit data, API, websocket)."""
        return asdict(self)


@dataclass(frozen=True)
class Evidence:
    """What one tick contributes, as plain numbers: stored per tick so an analysis can be replayed.

    `missing` marks a tick whose metrics could not be read (an outage): no evidence.
    `resolution` (latency read from histogram buckets only) holds, per latency channel,
    the bucket its pooled quantile fell in and whether it resolves the design shift
    (`resolution.channel_resolution`); None: raw samples, nothing hidden.
    """

    errors: tuple[float, float, float, float]  # n_b, n_c, k, c
    median: tuple[float, float, float, float]
    tail: tuple[float, float, float, float]
    canary_error_rate: float = 0.0
    baseline_error_rate: float = 0.0
    canary_p50_ms: float | None = None
    baseline_p50_ms: float | None = None
    canary_p99_ms: float | None = None
    baseline_p99_ms: float | None = None
    missing: bool = False
    note: str = ""
    resolution: dict[str, dict] | None = None

    def unresolved(self, channel: str) -> bool:
        """Whether this tick's buckets could hide a design-size shift of a latency channel."""
        res = (self.resolution or {}).get(channel)
        return bool(res) and not res.get("resolved", True)

    @property
    def empty(self) -> bool:
        """No evidence at all this tick: no metrics, or an arm without traffic."""
        return self.missing or self.errors[0] <= 0 or self.errors[1] <= 0

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Evidence:
        """Inverse of `as_dict` (rows stored before `missing` existed read as present)."""
        fields = dict(data)
        for ch in CHANNELS:
            fields[ch] = tuple(float(v) for v in fields[ch])
        return cls(**fields)

    @classmethod
    def none(cls, note: str = "") -> Evidence:
        """A tick without metrics (the source failed or answered nothing)."""
        zero = (0.0, 0.0, 0.0, 0.0)
        return cls(errors=zero, median=zero, tail=zero, missing=True, note=note)


def _ticks(n: int) -> str:
    return f"{n} tick{'' if n == 1 else 's'}"


def config_problems(cfg: AnalysisConfig) -> list[ConfigError]:
    """Every impossible setting of `cfg`, at most one per setting, in the order they are read;
    a setting that is not a number is not compared further."""
    found: list[ConfigError] = []

    def need(ok: bool, name: str, message: str) -> None:
        if not ok and all(p.field != name for p in found):
            found.append(ConfigError(name, message))

    def number(name: str, *, infinite: bool = False) -> float | None:
        # Every setting is a real number (not a bool, not NaN) before it is compared.
        value = getattr(cfg, name)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        try:
            ok = ok and not math.isnan(value) and (infinite or math.isfinite(value))
        except OverflowError:  # an integer beyond any float
            ok = False
        need(ok, name, f"must be a {'' if infinite else 'finite '}number, got {value!r}")
        return value if ok else None

    def integer(name: str) -> int | None:
        value = getattr(cfg, name)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        need(ok, name, f"must be a non-negative integer, got {value!r}")
        return value if ok else None

    rates = {}
    for name in ("alpha", "beta"):
        value = number(name)
        if value is not None:
            # Below the floor Wald's bounds are no longer finite numbers (1/alpha overflows).
            in_range = MIN_ERROR_RATE <= value < 0.5
            need(
                in_range,
                name,
                f"must be a probability in [{MIN_ERROR_RATE:g}, 0.5), got {value!r}",
            )
            if in_range:
                rates[name] = value
    if len(rates) == 2:
        need(rates["alpha"] + rates["beta"] < 1, "beta", "alpha + beta must be below 1")
    for name in ("error_ratio", "median_ratio", "tail_ratio"):
        value = number(name)
        if value is not None:
            need(value > 1, name, f"a design ratio must be greater than 1, got {value!r}")
    for name in ("median_shift", "tail_shift"):
        value = number(name)
        if value is not None:
            need(value > 1, name, f"a design shift must be greater than 1, got {value!r}")
    bounded = (
        ("tail_quantile", lambda v: 0.5 < v < 1, "must be in (0.5, 1)"),
        ("cusum_threshold", lambda v: v > 0, "must be positive"),
    )
    for name, ok, message in bounded:
        value = number(name)
        if value is not None:
            need(ok(value), name, message)
    # An infinite dispersion prior pins the dispersion at 1 (the textbook binomial SPRT).
    for name, infinite in (("dispersion_prior", True), ("dispersion_ticks", False)):
        value = number(name, infinite=infinite)
        if value is not None:
            need(value >= 0, name, "must be non-negative")
    warmup, horizon, most = (integer(n) for n in ("warmup_ticks", "horizon_ticks", "max_ticks"))
    if warmup is not None and horizon is not None:
        need(
            horizon > warmup,
            "horizon_ticks",
            f"the analysis ({_ticks(horizon)}) must be longer than its warm-up ({_ticks(warmup)})",
        )
    if most is not None and horizon is not None and warmup is not None:
        need(
            most >= horizon,
            "max_ticks",
            f"the max duration ({_ticks(most)}) must be at least the planned {_ticks(horizon)}, "
            f"and so longer than the warm-up ({warmup})",
        )
    confidence = number("alarm_confidence")
    if confidence is not None:
        need(
            0.5 <= confidence < 1,
            "alarm_confidence",
            f"must be a confidence level in [0.5, 1), got {confidence!r}",
        )
    for name, ok, message in (
        ("max_empty_share", lambda v: 0 < v <= 1, "must be in (0, 1]"),
        ("tick_seconds", lambda v: v > 0, "must be positive"),
    ):
        value = number(name)
        if value is not None:
            need(ok(value), name, message)
    return found


def override_problems(overrides: dict) -> list[ConfigError]:
    """The settings a new rollout asks for past `OVERRIDE_LIMITS`, one ConfigError each (an
    infinite dispersion prior is the binomial SPRT, allowed; a value that is not a number is
    `config_problems`' to name)."""
    found = []
    for name, (limit, what) in OVERRIDE_LIMITS.items():
        value = overrides.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if name == "dispersion_prior" and value == math.inf:
            continue
        if value > limit:
            found.append(ConfigError(name, f"{what} must be at most {limit:g}, got {value!r}"))
    return found
