"""One rollout's analysis: `Analyzer.update(baseline, canary) -> Decision`, and a tick's evidence.

The arithmetic is `engine.BatchAnalyzer`'s with one row; this module turns windows into
counts (`evidence`), keeps the decision a person reads (`Decision`, `settle_text`) and
replays stored evidence.
"""

from __future__ import annotations

import math

import numpy as np

from canary.sequential.counts import TickCounts, error_counts, rank_counts
from canary.sequential.engine import ACTIONS, REASONS, BatchAnalyzer
from canary.sequential.model import (
    CHANNELS,
    CONTINUE,
    PROMOTE,
    ROLLBACK,
    AnalysisConfig,
    Decision,
    Evidence,
    Window,
)
from canary.sequential.resolution import channel_resolution, resolution_text


def _p50_p99(values: np.ndarray) -> tuple[float | None, float | None]:
    """The median and p99 of one arm's samples (one partition for both; None without samples)."""
    n = values.size
    if not n:
        return None, None
    # np.quantile's linear interpolation, from one partition at the four order statistics.
    pos = [q * (n - 1) for q in (0.5, 0.99)]
    kth = sorted({min(int(p) + d, n - 1) for p in pos for d in (0, 1)})
    part = np.array(values, dtype=float, copy=True)
    part.partition(kth)
    out = []
    for p in pos:
        lo = int(p)
        hi = min(lo + 1, n - 1)
        out.append(float(part[lo] + (p - lo) * (part[hi] - part[lo])))
    return out[0], out[1]


def _as_tuple(t: TickCounts) -> tuple[float, float, float, float]:
    return (float(t.n_b[0]), float(t.n_c[0]), float(t.k[0]), float(t.c[0]))


def _as_counts(values: tuple[float, float, float, float]) -> TickCounts:
    return TickCounts(*(np.array([v], dtype=float) for v in values))


def _minutes(minutes: float) -> str:
    """An estimate's minutes in words: under half a minute is "under a minute", not "~0 min"."""
    return "under a minute" if minutes < 0.5 else f"~{minutes:g} min"


LATENCY_QUANTILES = {"median": 0.5}  # the tail channel's quantile is the config's


def latency_resolution(
    baseline: Window, canary: Window, config: AnalysisConfig
) -> dict[str, dict] | None:
    """Per latency channel, the bucket its pooled quantile falls in and whether it resolves
    the channel's design shift; None for raw samples (or no samples at all).

    The pooled quantile is the threshold `rank_counts` counts above: the (N - k)-th
    smallest of the N pooled samples, k = round((1 - q) N).
    """
    if baseline.bounds_ms is None and canary.bounds_ms is None:
        return None
    pooled = np.concatenate([baseline.latencies_ms, canary.latencies_ms])
    n = pooled.size
    if not baseline.latencies_ms.size or not canary.latencies_ms.size:
        return None
    bounds = sorted(set(baseline.bounds_ms or ()) | set(canary.bounds_ms or ()))
    quantiles = {**LATENCY_QUANTILES, "tail": config.tail_quantile}
    kth = {ch: n - max(int(round((1.0 - q) * n)), 1) for ch, q in quantiles.items()}
    part = np.partition(pooled, sorted(set(kth.values())))
    return {
        ch: channel_resolution(bounds, float(part[kth[ch]]), config.shift(ch)) for ch in quantiles
    }


def evidence(baseline: Window | None, canary: Window | None, config: AnalysisConfig) -> Evidence:
    """Reduce one tick of both arms to the counts the analysis needs (None: no metrics)."""
    if baseline is None or canary is None:
        return Evidence.none("no metrics for this window")
    b_lat = baseline.latencies_ms[None, :]
    c_lat = canary.latencies_ms[None, :]
    # Both pooled thresholds from one partition of the pooled samples.
    median, tail = rank_counts(b_lat, c_lat, (0.5, config.tail_quantile))
    canary_p50, canary_p99 = _p50_p99(canary.latencies_ms)
    baseline_p50, baseline_p99 = _p50_p99(baseline.latencies_ms)
    return Evidence(
        errors=_as_tuple(
            error_counts([baseline.requests], [baseline.errors], [canary.requests], [canary.errors])
        ),
        median=_as_tuple(median),
        tail=_as_tuple(tail),
        canary_error_rate=canary.errors / canary.requests if canary.requests else 0.0,
        baseline_error_rate=baseline.errors / baseline.requests if baseline.requests else 0.0,
        canary_p50_ms=canary_p50,
        baseline_p50_ms=baseline_p50,
        canary_p99_ms=canary_p99,
        baseline_p99_ms=baseline_p99,
        resolution=latency_resolution(baseline, canary, config),
    )


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


class Analyzer:
    """Sequential analysis of one rollout: `update(baseline, canary) -> Decision` per tick."""

    def __init__(self, config: AnalysisConfig | None = None) -> None:
        self.config = config or AnalysisConfig()
        self._batch = BatchAnalyzer(self.config, 1, latch_inconclusive=False)
        self.final: Decision | None = None
        # The latest bucket each latency channel was judged in (histogram metrics only).
        self.resolution: dict[str, dict] = {}

    @property
    def tick(self) -> int:
        return self._batch.tick

    def update(self, baseline: Window | None, canary: Window | None) -> Decision:
        """Add one tick of both arms and decide (None for either: no metrics this tick)."""
        return self.observe(evidence(baseline, canary, self.config))

    def replay(self, history: list[Evidence]) -> Decision | None:
        """Feed stored evidence in order (a restarted worker rebuilds its state); last decision."""
        decision = None
        for item in history:
            decision = self.observe(item)
        return decision

    def observe(self, ev: Evidence) -> Decision:
        """Add one tick's evidence and decide; a promotion or rollback is final and repeated.

        An inconclusive verdict is not final: evidence added after it (the analysis was
        extended) is analysed, and the verdict holds again while the reason holds.
        """
        if self.final is not None:
            return self.final
        cfg = self.config
        b = self._batch
        actions, reasons = b.update_counts(
            _as_counts(ev.errors),
            _as_counts(ev.median),
            _as_counts(ev.tail),
            missing=np.array([ev.missing]),
            unresolved={ch: np.array([ev.unresolved(ch)]) for ch in ("median", "tail")},
        )
        for ch, res in (ev.resolution or {}).items() if not ev.empty else ():
            # The page explains the bucket that keeps a channel from being accepted, else the
            # latest one.
            if not (b.unresolved[ch][0] and res.get("resolved", True)):
                self.resolution[ch] = res
        action = ACTIONS[int(actions[0])]
        reason = REASONS[int(reasons[0])]
        if b.tick <= cfg.warmup_ticks:
            reason = f"warm-up tick {b.tick} of {cfg.warmup_ticks}: not used as evidence"
        elif ev.empty and action == CONTINUE:
            reason = (
                "no evidence this window ("
                + (ev.note or "no metrics" if ev.missing else "an arm served no traffic")
                + ")"
            )
        channels = self._channels()
        needed = [c for c in channels.values() if not c["accepted"]]
        requests = max((c["requests_needed"] for c in needed), default=0.0, key=_inf_none)
        minutes = max((c["minutes_needed"] for c in needed), default=0.0, key=_inf_none)
        decision = Decision(
            action=action,
            reason=reason,
            tick=b.tick,
            llr=float(b.llr["errors"][0]),
            llr_lower=cfg.lower,
            llr_upper=cfg.upper,
            errors_accepted=bool(b.accepted["errors"][0]),
            cusum=float(max(b.cusum["median"][0], b.cusum["tail"][0])),
            cusum_median=float(b.cusum["median"][0]),
            cusum_tail=float(b.cusum["tail"][0]),
            cusum_threshold=cfg.cusum_threshold,
            dispersion={ch: float(b.phi[ch][0]) for ch in CHANNELS},
            alarm_dispersion={ch: float(b.phi_alarm[ch][0]) for ch in CHANNELS},
            canary_error_rate=ev.canary_error_rate,
            baseline_error_rate=ev.baseline_error_rate,
            canary_p50_ms=ev.canary_p50_ms,
            baseline_p50_ms=ev.baseline_p50_ms,
            canary_p99_ms=ev.canary_p99_ms,
            baseline_p99_ms=ev.baseline_p99_ms,
            channels=channels,
            requests_needed=requests,
            minutes_needed=minutes,
            empty_ticks=int(b.empty_ticks[0]),
            max_ticks=cfg.max_ticks,
            settle=settle_text(action, channels, cfg, self.resolution),
            resolution={ch: c["resolution"] for ch, c in channels.items() if c["resolution"]},
        )
        if decision.action in (PROMOTE, ROLLBACK):
            self.final = decision
        return decision

    def _channels(self) -> dict[str, dict]:
        b, cfg = self._batch, self.config
        out = {}
        for ch in CHANNELS:
            ticks = float(b.ticks_needed[ch][0])
            if b.tick <= cfg.warmup_ticks or not b.seen_traffic[0]:
                ticks = math.inf
            if b.accepted[ch][0]:
                ticks = 0.0
            out[ch] = {
                "llr": float(b.llr[ch][0]),
                "accepted": bool(b.accepted[ch][0]),
                # False: the buckets could hide the design shift; never accepted (held).
                "resolved": not bool(b.unresolved[ch][0]),
                "held": bool(b.held[ch][0]),
                # The bucket its pooled quantile fell in (None: exact counts or raw samples).
                "resolution": {**res, "text": resolution_text(LABELS[ch], res)}
                if (res := self.resolution.get(ch))
                else None,
                "cusum": float(b.cusum[ch][0]) if ch in b.cusum else None,
                "ratio": cfg.ratio(ch),
                "ticks_needed": _finite(ticks),
                "requests_needed": _finite(math.ceil(ticks * float(b.canary_requests[0])))
                if math.isfinite(ticks)
                else None,
                "minutes_needed": _finite(round(ticks * cfg.tick_seconds / 60.0, 1)),
            }
        return out


def _inf_none(value: float | None) -> float:
    return math.inf if value is None else value


LABELS = {"errors": "error rate", "median": "median latency", "tail": "tail latency"}


def settle_text(
    action: str,
    channels: dict[str, dict],
    cfg: AnalysisConfig,
    resolution: dict[str, dict] | None = None,
) -> str:
    """One line: what would settle an undecided rollout (finer buckets, or more requests)."""
    if action in (PROMOTE, ROLLBACK):
        return ""
    parts = []
    unresolved = [
        resolution_text(LABELS[ch], (resolution or {})[ch])
        for ch, c in channels.items()
        if not c.get("resolved", True) and ch in (resolution or {})
    ]
    if unresolved:
        # More requests cannot help a channel its buckets keep from being accepted.
        return "To promote, the latency histogram needs finer buckets — " + "; ".join(unresolved)
    for ch, c in channels.items():
        if c["accepted"]:
            continue
        if c["requests_needed"] is None:
            parts.append(f"{LABELS[ch]}: no traffic to estimate from yet")
        else:
            parts.append(
                f"{LABELS[ch]}: about {int(c['requests_needed']):,} more canary requests "
                f"({_minutes(c['minutes_needed'])} at current traffic)"
            )
    if not parts:
        return ""
    return "To promote, if the canary is as good as the baseline — " + "; ".join(parts)
