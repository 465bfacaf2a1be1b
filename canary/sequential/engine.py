"""The decision engine: `BatchAnalyzer`, R rollouts in lock-step (`analyzer.Analyzer`: one).

Both run the same arithmetic; see the package docstring for the rule and why it is valid.
"""

from __future__ import annotations

import numpy as np

from canary.sequential import model
from canary.sequential.counts import (
    History,
    TickCounts,
    dispersion_bounds,
    h0_drift,
    surge,
    tick_llr,
)
from canary.sequential.model import CHANNELS, AnalysisConfig

# Action codes of the batch engine.
A_CONTINUE, A_PROMOTE, A_ROLLBACK, A_INCONCLUSIVE = 0, 1, 2, 3
ACTIONS = {
    A_CONTINUE: model.CONTINUE,
    A_PROMOTE: model.PROMOTE,
    A_ROLLBACK: model.ROLLBACK,
    A_INCONCLUSIVE: model.INCONCLUSIVE,
}
REASONS = {
    0: "collecting evidence",
    1: "canary error rate exceeds the baseline's (SPRT upper bound crossed)",
    2: "canary median latency exceeds the baseline's (CUSUM threshold crossed)",
    3: "canary tail latency exceeds the baseline's (CUSUM threshold crossed)",
    4: "every channel has evidence the canary is not worse than the baseline by its design "
    "ratio (errors, median and tail latency crossed their SPRT accept bounds)",
    5: "inconclusive: max duration reached without enough evidence to promote or roll back",
    6: "inconclusive: too many windows without traffic or metrics",
    7: "inconclusive: at the current traffic the evidence still needed cannot arrive "
    "before the max duration",
    8: "inconclusive: the latency histogram's buckets cannot resolve the design shift (a "
    "canary slower by it could look as good as the baseline), so a latency channel that "
    "found no regression cannot be accepted",
}
EMA = 0.3  # weight of the newest tick in the traffic estimate behind the sample sizes


class BatchAnalyzer:
    """The sequential analysis of R rollouts in lock-step (same arithmetic as `Analyzer`)."""

    def __init__(
        self,
        config: AnalysisConfig,
        rollouts: int,
        *,
        latch_inconclusive: bool = True,
        row_configs: list[AnalysisConfig] | None = None,
    ) -> None:
        """`row_configs` (one per rollout) lets rows differ in their error rates, CUSUM
        threshold and dispersion prior (a benchmark's grid in one batch); durations, design
        ratios and the tail quantile are `config`'s for every row."""
        self.config = config
        self.rollouts = rollouts
        rows = row_configs if row_configs is not None else [config]
        for other in rows:
            shared = ("warmup_ticks", "horizon_ticks", "max_ticks", "max_empty_share")
            shared += ("error_ratio", "median_ratio", "tail_ratio", "tail_quantile")
            if any(getattr(other, f) != getattr(config, f) for f in shared):
                raise ValueError("row configs may differ only in their error rates and priors")
        if row_configs is not None and len(row_configs) != rollouts:
            raise ValueError("one row config per rollout")

        def per_row(name: str):
            values = np.array([getattr(c, name) for c in rows], dtype=float)
            return values if row_configs is not None else float(values[0])

        self.lower = per_row("lower")
        self.upper = per_row("upper")
        self.cusum_threshold = per_row("cusum_threshold")
        self.dispersion_prior = per_row("dispersion_prior")
        self.dispersion_ticks = per_row("dispersion_ticks")
        self.alarm_confidence = per_row("alarm_confidence")
        # False: an inconclusive row keeps being analysed (a person may extend the analysis).
        self.latch_inconclusive = latch_inconclusive
        self.tick = 0
        r = rollouts
        # Room for the ticks the analysis may run, up to a few thousand: the history grows
        # by doubling, so a long max duration costs memory only as its ticks come.
        cap = min(max(config.max_ticks - config.warmup_ticks, 1), 4096)
        self.history = {ch: History(r, cap) for ch in CHANNELS}
        self.error_rates: list[np.ndarray] = []
        self.llr_raw = {ch: np.zeros(r) for ch in CHANNELS}
        self.llr = {ch: np.zeros(r) for ch in CHANNELS}
        self.accepted = {ch: np.zeros(r, dtype=bool) for ch in CHANNELS}
        # A channel whose evidence came from a bucket that can hide its design shift is
        # never accepted: it is held where it would have been (`resolution.py`).
        self.unresolved = {ch: np.zeros(r, dtype=bool) for ch in CHANNELS}
        self.held = {ch: np.zeros(r, dtype=bool) for ch in CHANNELS}
        self.cusum_raw = {ch: np.zeros(r) for ch in ("median", "tail")}
        self.cusum = {ch: np.zeros(r) for ch in ("median", "tail")}
        self.phi = {ch: np.ones(r) for ch in CHANNELS}
        # Upper confidence bound of the dispersion: what the rollback alarms divide by.
        self.phi_alarm = {ch: np.ones(r) for ch in CHANNELS}
        # Traffic now (moving averages over ticks with evidence) for the sample-size estimate.
        self.traffic = {ch: np.zeros((3, r)) for ch in CHANNELS}  # n_b, n_c, k per tick
        self.canary_requests = np.zeros(r)
        self.seen_traffic = np.zeros(r, dtype=bool)
        self.ticks_needed = {ch: np.full(r, np.inf) for ch in CHANNELS}
        self.empty_ticks = np.zeros(r, dtype=int)
        self.decided = np.zeros(r, dtype=bool)

    def keep(self, rows: np.ndarray) -> None:
        """Go on with the rollouts `rows` (an index or mask) only, forgetting the others.

        A benchmark drops the rollouts it has seen decided, so that the analysis of the
        last undecided ones does not carry every decided one along.
        """
        rows = np.asarray(rows)
        for name, value in vars(self).items():
            if isinstance(value, dict):
                for key, array in value.items():
                    value[key] = array[..., rows] if isinstance(array, np.ndarray) else array
                    if isinstance(array, History):
                        array.keep(rows)
            elif isinstance(value, np.ndarray):
                setattr(self, name, value[rows])
        self.error_rates = [e[rows] for e in self.error_rates]
        self.rollouts = len(self.decided)

    @property
    def errors_accepted(self) -> np.ndarray:
        return self.accepted["errors"]

    def update_counts(
        self,
        errors: TickCounts,
        median: TickCounts,
        tail: TickCounts,
        missing: np.ndarray | None = None,
        unresolved: dict[str, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Advance one tick; return (action codes, reason codes) per rollout.

        `missing` marks rollouts whose metrics could not be read this tick. A row
        without metrics or without traffic in either arm is no evidence: all its
        counts are zeroed before they reach any statistic. `unresolved` marks, per
        latency channel, rows whose histogram bucket could hide the design shift this
        tick: such a channel is never accepted afterwards (its SPRT is held instead,
        and the rollout ends inconclusive once nothing else is left to decide).
        """
        cfg = self.config
        r = self.rollouts
        self.tick += 1
        empty = (errors.n_b <= 0) | (errors.n_c <= 0)
        if missing is not None:
            empty = empty | np.asarray(missing, dtype=bool)
        counts = {"errors": errors, "median": median, "tail": tail}
        if empty.any():
            counts = {
                ch: TickCounts(
                    *(np.where(empty, 0.0, getattr(t, f)) for f in ("n_b", "n_c", "k", "c"))
                )
                for ch, t in counts.items()
            }
        e = counts["errors"]
        # The usual error level is learnt from windows with evidence only (NaN: none).
        self.error_rates.append(np.where(empty, np.nan, e.k / np.maximum(e.n_b + e.n_c, 1)))
        actions = np.zeros(r, dtype=np.int8)
        reasons = np.zeros(r, dtype=np.int8)
        if self.tick <= cfg.warmup_ticks:
            return actions, reasons
        self.empty_ticks += empty.astype(int)
        for ch, mask in (unresolved or {}).items():
            self.unresolved[ch] |= np.asarray(mask, dtype=bool) & ~empty
        for ch in CHANNELS:
            self.history[ch].append(counts[ch])
        temper = surge(self.history["errors"], self.error_rates)
        for ch in CHANNELS:
            t = temper if ch == "errors" else np.ones_like(temper)
            phi, phi_alarm = dispersion_bounds(
                self.history[ch],
                self.dispersion_prior,
                self.dispersion_ticks,
                t,
                self.alarm_confidence,
            )
            # A window without evidence changes no statistic, the dispersion included: all
            # it can do is use up time (the max duration, the share of empty windows).
            self.phi[ch] = np.where(empty, self.phi[ch], phi)
            self.phi_alarm[ch] = np.where(empty, self.phi_alarm[ch], phi_alarm)
        for ch in CHANNELS:
            rho = cfg.ratio(ch)
            llr_t = tick_llr(counts[ch], rho)
            if ch == "errors":
                # A tick in a traffic-wide error surge counts no more than one at the usual level.
                llr_t = llr_t / temper[-1]
            # Wald's test stops once it has accepted (or been held): the channel keeps its llr.
            open_ = ~self.accepted[ch] & ~self.held[ch]
            self.llr_raw[ch] = self.llr_raw[ch] + np.where(open_, llr_t, 0.0)
            self.llr[ch] = np.where(open_, self.llr_raw[ch] / self.phi[ch], self.llr[ch])
            crossed = open_ & (self.llr[ch] <= self.lower)
            self.accepted[ch] |= crossed & ~self.unresolved[ch]
            self.held[ch] |= crossed & self.unresolved[ch]
            if ch != "errors":
                raw = np.maximum(0.0, self.cusum_raw[ch] + tick_llr(counts[ch], rho))
                self.cusum_raw[ch] = raw
                self.cusum[ch] = raw / self.phi_alarm[ch]
        self._estimate(counts, empty)
        # Alarms read the evidence at the upper bound of the dispersion: a rollback needs the
        # regression to stand out even from as noisy a baseline as the data allow.
        err_alarm = ~self.accepted["errors"] & (
            self.llr_raw["errors"] / self.phi_alarm["errors"] >= self.upper
        )
        med_alarm = self.cusum["median"] >= self.cusum_threshold
        tail_alarm = self.cusum["tail"] >= self.cusum_threshold
        open_rows = ~self.decided
        rollback = open_rows & (err_alarm | med_alarm | tail_alarm)
        promote = (
            open_rows & ~rollback & np.logical_and.reduce([self.accepted[ch] for ch in CHANNELS])
        )
        rest = open_rows & ~rollback & ~promote
        # Every channel accepted or held, one held: more ticks cannot promote, only roll back.
        settled = np.logical_and.reduce([self.accepted[ch] | self.held[ch] for ch in CHANNELS])
        unresolvable = rest & settled & np.logical_or.reduce([self.held[ch] for ch in CHANNELS])
        rest = rest & ~unresolvable
        evidence_ticks = self.tick - cfg.warmup_ticks
        past_plan = self.tick >= cfg.horizon_ticks
        at_max = rest & (self.tick >= cfg.max_ticks)
        too_empty = (
            rest & ~at_max & past_plan & (self.empty_ticks > cfg.max_empty_share * evidence_ticks)
        )
        remaining = cfg.max_ticks - self.tick
        # Extend past the planned steps only while a decision is in reach: out of reach is
        # more than twice the time left and more than a whole planned rollout (slack: the
        # estimate assumes today's traffic and a canary exactly as good as the baseline).
        needed = self.needed_ticks()
        out_of_reach = (
            rest
            & ~at_max
            & ~too_empty
            & past_plan
            & (needed > 2 * remaining)
            & (needed > cfg.horizon_ticks)
        )
        inconclusive = unresolvable | at_max | too_empty | out_of_reach
        reasons = np.select(
            [
                rollback & err_alarm,
                rollback & med_alarm,
                rollback,
                promote,
                unresolvable,
                at_max,
                too_empty,
                out_of_reach,
            ],
            [1, 2, 3, 4, 8, 5, 6, 7],
            0,
        ).astype(np.int8)
        actions = np.select(
            [rollback, promote, inconclusive], [A_ROLLBACK, A_PROMOTE, A_INCONCLUSIVE], A_CONTINUE
        ).astype(np.int8)
        self.decided |= rollback | promote | (inconclusive & self.latch_inconclusive)
        return actions, reasons

    def _estimate(self, counts: dict[str, TickCounts], empty: np.ndarray) -> None:
        """Requests still needed per channel: llr distance to the accept bound over the H0 drift."""
        cfg = self.config
        has = ~empty
        first = has & ~self.seen_traffic
        w = np.where(first, 1.0, np.where(has, EMA, 0.0))
        self.seen_traffic |= has
        for ch in CHANNELS:
            t = counts[ch]
            now = np.stack([t.n_b, t.n_c, t.k])
            self.traffic[ch] = (1 - w) * self.traffic[ch] + w * now
            n_b, n_c, k = self.traffic[ch]
            drift = h0_drift(n_b, n_c, k, cfg.ratio(ch))
            distance = np.maximum(0.0, self.llr[ch] - self.lower) * self.phi[ch]
            with np.errstate(divide="ignore", invalid="ignore"):
                ticks = np.where(drift > 0, distance / np.where(drift > 0, drift, 1.0), np.inf)
            self.ticks_needed[ch] = np.where(self.accepted[ch] | self.held[ch], 0.0, ticks)
        self.canary_requests = (1 - w) * self.canary_requests + w * counts["errors"].n_c

    def needed_ticks(self) -> np.ndarray:
        """Ticks still needed to accept every channel at the current traffic (inf: no traffic)."""
        return np.max(np.stack([self.ticks_needed[ch] for ch in CHANNELS]), axis=0)
