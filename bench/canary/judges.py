"""The judges compared on the same streams: Kiln's engine, a Kayenta-style judge, a threshold judge.

Each `judge_*` function returns an `Outcome`: per rollout the first action taken
(1 promote, 2 roll back, 3 inconclusive, 0 none) and the tick (minute) it was taken.

Threshold judge (Argo Rollouts AnalysisTemplate / Flagger metric checks): each
window, the canary alone is measured against fixed limits an operator set from
the service's nominal numbers (error rate x `error_factor`, p50 x `median_factor`,
p99 x `p99_factor`); the first `initial_delay` windows are skipped (Argo's
initialDelay); the rollout is aborted once more than `failure_limit` windows
failed (failureLimit) and promoted at the end of its planned steps otherwise. A
window without requests or metrics fails nothing: the measurement errored, and
errored measurements do not fail an analysis (argo-rollouts#4479, flagger#1035).

Kayenta-style judge (Netflix/Spinnaker automated canary analysis): at the end of
every step it compares the step's per-minute series of each metric (error rate,
p50, p99), canary against baseline, with a two-sided Mann-Whitney U test; a
metric fails ("High") when the test rejects at `confidence` and the canary's
median exceeds the baseline's by more than the metric's effect-size tolerance.
A metric with fewer than 3 minutes of data on either side is NoData and left
out (kayenta#426: zero-heavy counts pass). The group score is 100 x passing /
scored metrics; a score below `marginal` at any step rolls back, and at the end
a score of at least `pass_score` promotes (all NoData: 100).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from bench.canary.streams import BENCH_STEPS, HORIZON, Streams
from canary.sequential import A_INCONCLUSIVE, AnalysisConfig, BatchAnalyzer, TickCounts


@dataclass
class Outcome:
    """Per rollout: first action (0 none, 1 promote, 2 roll back, 3 inconclusive) and its tick."""

    action: np.ndarray
    tick: np.ndarray
    # Kiln only, for inconclusive rollouts: canary requests still needed / seen, dominant channel.
    requests_needed: np.ndarray | None = None
    requests_seen: np.ndarray | None = None
    channel: np.ndarray | None = None

    def rows(self, rows: slice) -> Outcome:
        """The outcomes of some of the rollouts."""
        fields = ("action", "tick", "requests_needed", "requests_seen", "channel")
        return Outcome(
            *(None if getattr(self, f) is None else getattr(self, f)[rows] for f in fields)
        )


def _record(out: Outcome, actions: np.ndarray, t: int) -> np.ndarray:
    new = (out.action == 0) & (actions != 0)
    out.action[new] = actions[new]
    out.tick[new] = t + 1
    return new


class KilnJudge:
    """Kiln's sequential engine, exactly as a rollout runs it, fed one tick of R rollouts at a time.

    The simulation feeds it while it runs (and stops once every watched judge is done),
    so the engine runs once, never replayed. Several configurations (a tuning grid) are
    judged in one batch: every configuration sees every rollout (rows = configs x R).
    """

    def __init__(self, configs: list[AnalysisConfig], rollouts: int) -> None:
        self.configs = list(configs)
        self.rollouts = r = rollouts
        rows = [cfg for cfg in self.configs for _ in range(r)]
        n = len(rows)
        self.config = self.configs[0]
        self.engine = BatchAnalyzer(self.config, n, row_configs=rows)
        self.outcome = Outcome(
            np.zeros(n, np.int8), np.zeros(n, int), np.zeros(n), np.zeros(n), np.zeros(n, int)
        )
        self.seen = np.zeros(n)
        self.ticks = 0
        self.active = np.arange(n)  # the engine's rows: rollouts not decided yet

    @property
    def done(self) -> bool:
        """Every rollout decided, or the max duration reached: later ticks change nothing."""
        return self.active.size == 0 or self.ticks >= self.config.max_ticks

    def update(self, errors, median, tail, missing: np.ndarray, req_c: np.ndarray) -> None:
        """One tick of every rollout (counts per channel, missing metrics, canary requests)."""
        if self.done:
            return
        t = self.ticks
        self.ticks += 1
        out, engine, rows = self.outcome, self.engine, self.active
        r = self.rollouts
        src = rows % r  # the simulated rollout behind each engine row

        def pick(x: TickCounts) -> TickCounts:
            return TickCounts(*(getattr(x, f)[src] for f in ("n_b", "n_c", "k", "c")))

        missing = np.asarray(missing, dtype=bool)[src]
        self.seen[rows] += np.where(missing, 0.0, req_c[src])
        actions, _ = engine.update_counts(pick(errors), pick(median), pick(tail), missing)
        new = (out.action[rows] == 0) & (actions != 0)
        out.action[rows[new]] = actions[new]
        out.tick[rows[new]] = t + 1
        held = new & (actions == A_INCONCLUSIVE)
        if held.any():
            needed = np.stack([engine.ticks_needed[ch] for ch in ("errors", "median", "tail")])
            out.channel[rows[held]] = np.argmax(needed, axis=0)[held]
            ticks_needed = needed.max(axis=0)
            out.requests_needed[rows[held]] = (ticks_needed * engine.canary_requests)[held]
            out.requests_seen[rows[held]] = self.seen[rows[held]]
        # Decided rows can change nothing more: drop them once they are a quarter of the batch.
        if engine.decided.sum() * 4 >= rows.size:
            undecided = ~engine.decided
            engine.keep(undecided)
            self.active = rows[undecided]

    def outcomes(self) -> list[Outcome]:
        """One `Outcome` per configuration, in the order given."""
        r = self.rollouts
        fields = ("action", "tick", "requests_needed", "requests_seen", "channel")
        return [
            Outcome(*(getattr(self.outcome, f)[i * r : (i + 1) * r] for f in fields))
            for i in range(len(self.configs))
        ]


def judge_kiln(s: Streams, config: AnalysisConfig) -> Outcome:
    """Kiln's sequential engine over recorded streams (the same as watching the simulation)."""
    judge = KilnJudge([config], s.rollouts)
    for t in range(s.req_b.shape[0]):
        if judge.done:
            break
        judge.update(s.errors(t), s.median[t], s.tail[t], s.missing[t], s.req_c[t])
    return judge.outcome


@dataclass(frozen=True)
class ThresholdConfig:
    """A per-window fixed-threshold judge (Argo Rollouts / Flagger style).

    The defaults are its best case on the tuning seeds (`runner.THRESHOLD_GRID`).
    """

    error_factor: float = 1.5
    median_factor: float = 1.2
    p99_factor: float = 1.5
    failure_limit: int = 8
    initial_delay: int = 5


class ThresholdJudge:
    """Counts failed windows (canary over a fixed threshold) and aborts past the failure limit."""

    def __init__(
        self, config: ThresholdConfig, nominal: dict[str, float], rollouts: int, horizon: int
    ):
        self.config = config
        self.error_max = nominal["error_rate"] * config.error_factor
        self.p50_max = nominal["p50_ms"] * config.median_factor
        self.p99_max = nominal["p99_ms"] * config.p99_factor
        self.failures = np.zeros(rollouts, dtype=int)
        self.decided = np.zeros(rollouts, dtype=bool)
        self.horizon = horizon
        self.tick = 0

    def update(self, req_c, err_c, p50_c, p99_c, missing=None) -> np.ndarray:
        """One window; returns action codes (0 continue, 1 promote, 2 rollback)."""
        self.tick += 1
        actions = np.zeros(req_c.shape[0], dtype=np.int8)
        if self.tick > self.config.initial_delay:
            measured = req_c > 0
            if missing is not None:
                measured &= ~missing
            rate = np.where(measured, err_c / np.maximum(req_c, 1), 0.0)
            failed = (rate > self.error_max) | (p50_c > self.p50_max) | (p99_c > self.p99_max)
            self.failures += (failed & measured).astype(int)
        rollback = ~self.decided & (self.failures > self.config.failure_limit)
        promote = ~self.decided & ~rollback & (self.tick >= self.horizon)
        actions[rollback] = 2
        actions[promote] = 1
        self.decided |= rollback | promote
        return actions


def judge_threshold(s: Streams, config: ThresholdConfig, nominal: dict[str, float]) -> Outcome:
    """The threshold judge over the planned steps."""
    r = s.rollouts
    judge = ThresholdJudge(config, nominal, r, HORIZON)
    out = Outcome(np.zeros(r, np.int8), np.zeros(r, int))
    for t in range(HORIZON):
        _record(out, judge.update(s.req_c[t], s.err_c[t], s.p50_c[t], s.p99_c[t], s.missing[t]), t)
    return out


@dataclass(frozen=True)
class KayentaConfig:
    """Mann-Whitney confidence, effect-size tolerances (relative increase) and score thresholds.

    The defaults are its best case on the tuning seeds (`runner.KAYENTA_GRID`).
    """

    confidence: float = 0.95
    error_tolerance: float = 1.0
    latency_tolerance: float = 0.2
    marginal: float = 75.0
    pass_score: float = 95.0


def mann_whitney_p(
    x: np.ndarray, y: np.ndarray, valid_x: np.ndarray, valid_y: np.ndarray
) -> np.ndarray:
    """Two-sided Mann-Whitney U p-value per row (normal approximation with tie correction).

    x (R, n), y (R, m); entries where valid_* is False are left out.
    """
    gt = (x[:, :, None] > y[:, None, :]) & valid_x[:, :, None] & valid_y[:, None, :]
    eq = (x[:, :, None] == y[:, None, :]) & valid_x[:, :, None] & valid_y[:, None, :]
    u = gt.sum((1, 2)) + 0.5 * eq.sum((1, 2))
    n1, n2 = valid_x.sum(1).astype(float), valid_y.sum(1).astype(float)
    n = n1 + n2
    # Tie correction: sum over tied groups of t^3 - t, from the pooled values.
    pooled = np.where(np.concatenate([valid_x, valid_y], 1), np.concatenate([x, y], 1), np.nan)
    srt = np.sort(pooled, axis=1)
    same = srt[:, 1:] == srt[:, :-1]
    # Run lengths of equal values: count pairs per run via cumulative trick.
    ties = np.zeros(x.shape[0])
    run = np.ones(x.shape[0])
    for j in range(same.shape[1]):
        run = np.where(same[:, j], run + 1, run)
        end = ~same[:, j] | (j == same.shape[1] - 1)
        ties += np.where(end & (run > 1), run**3 - run, 0.0)
        run = np.where(~same[:, j], 1.0, run)
    var = n1 * n2 / 12 * ((n + 1) - ties / np.maximum(n * (n - 1), 1))
    z = (u - n1 * n2 / 2) / np.sqrt(np.maximum(var, 1e-12))
    p = np.array([math.erfc(abs(v) / math.sqrt(2)) for v in z])
    return np.where(var > 1e-9, p, 1.0)


def _nanmedian(v: np.ndarray, valid: np.ndarray) -> np.ndarray:
    return np.nanmedian(np.where(valid, v, np.nan), axis=1)


def judge_kayenta(s: Streams, config: KayentaConfig) -> Outcome:
    """The Kayenta-style judge, run at the end of every step of the planned rollout."""
    r = s.rollouts
    out = Outcome(np.zeros(r, np.int8), np.zeros(r, int))
    start = 0
    with np.errstate(invalid="ignore", divide="ignore"), _quiet():
        for _, ticks in BENCH_STEPS:
            end = start + ticks
            window = slice(start, end)
            ok = ~s.missing[window].T & (s.req_c[window].T > 0) & (s.req_b[window].T > 0)
            metrics = (
                (
                    s.err_c[window].T / np.maximum(s.req_c[window].T, 1),
                    s.err_b[window].T / np.maximum(s.req_b[window].T, 1),
                    config.error_tolerance,
                ),
                (s.p50_c[window].T, s.p50_b[window].T, config.latency_tolerance),
                (s.p99_c[window].T, s.p99_b[window].T, config.latency_tolerance),
            )
            scored = np.zeros(r)
            passed = np.zeros(r)
            for canary, baseline, tolerance in metrics:
                valid = ok & np.isfinite(canary) & np.isfinite(baseline)
                has_data = valid.sum(1) >= 3
                p = mann_whitney_p(canary, baseline, valid, valid)
                mc, mb = _nanmedian(canary, valid), _nanmedian(baseline, valid)
                high = (p < 1 - config.confidence) & (mc > mb * (1 + tolerance)) & (mc > mb)
                scored += has_data
                passed += has_data & ~high
            score = np.where(scored > 0, 100 * passed / np.maximum(scored, 1), 100.0)
            actions = np.where(score < config.marginal, 2, 0).astype(np.int8)
            if end >= HORIZON:
                actions = np.where(
                    actions == 0, np.where(score >= config.pass_score, 1, 2), actions
                )
                actions = actions.astype(np.int8)
            _record(out, actions, end - 1)
            start = end
    return out


class _quiet:
    """Silence numpy's all-NaN warnings of rows without data (they are NoData by design)."""

    def __enter__(self):
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)
