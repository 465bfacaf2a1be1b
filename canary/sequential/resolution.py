"""Histogram resolution: whether a latency channel's buckets can see a shift of its design size.

Latency read from a histogram is known only to its bucket: a request of 60 ms and one of
75 ms both count as "at most 100 ms" with Istio's default bounds. The latency channels
count which arm the samples above a pooled quantile came from, so a shift by a factor s
that moves requests only *within* the bucket holding that quantile changes no count: the
channel sees "as good as the baseline" and would accept "not worse by the design ratio"
for a canary that is worse by exactly that ratio. The guarantee then silently means
something else. This module decides, from the bucket bounds a window was read with,
whether the pooled quantile's bucket (lo, hi] can hide such a shift:

    a shift by s can stay inside (lo, hi]  <=>  some x in (lo, hi] has s x in (lo, hi]
                                           <=>  hi > s lo

so the bucket resolves the shift when hi <= s lo (lo > 0, hi finite). The first bucket
(0, hi] and the overflow bucket (lo, +Inf) never do. Native (exponential) histograms of
schema n have bounds 2^(i 2^-n): every bucket has hi/lo = 2^(2^-n), so a schema with
2^(2^-n) <= s resolves the shift wherever the quantile falls (schema 2, factor 1.19, for
a +25% median shift; schema 1, factor 1.41, for a +50% tail stretch).

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MIN_SCHEMA, MAX_SCHEMA = -4, 8  # the schemas Prometheus's native histograms allow
MAX_SUGGESTED = 8  # bucket bounds suggested per unresolved bucket


def native_factor(schema: int) -> float:
    """The growth factor 2^(2^-schema) between consecutive bounds of a native histogram."""
    return 2.0 ** (2.0**-schema)


def native_bounds(schema: int, lo_ms: float, hi_ms: float) -> np.ndarray:
    """The bounds 2^(i 2^-schema) of a native histogram that lie in [lo_ms, hi_ms] (lo_ms > 0)."""
    if lo_ms <= 0 or hi_ms < lo_ms:
        raise ValueError("need 0 < lo_ms <= hi_ms")
    step = 2.0**-schema
    first = math.floor(math.log2(lo_ms) / step)
    last = math.ceil(math.log2(hi_ms) / step)
    bounds = 2.0 ** (np.arange(first, last + 1) * step)
    return bounds[(bounds >= lo_ms * (1 - 1e-12)) & (bounds <= hi_ms * (1 + 1e-12))]


def schema_for(shift: float) -> int | None:
    """The smallest native-histogram schema whose buckets resolve `shift` (None: none does)."""
    for schema in range(MIN_SCHEMA, MAX_SCHEMA + 1):
        if native_factor(schema) <= shift * (1 + 1e-12):
            return schema
    return None


def bucket_of(bounds: Sequence[float], value: float) -> tuple[float, float]:
    """The bucket (lo, hi] of sorted finite upper `bounds` that holds `value` (hi inf: overflow)."""
    edges = np.asarray(bounds, dtype=float)
    i = int(np.searchsorted(edges, value, side="left"))
    lo = float(edges[i - 1]) if i > 0 else 0.0
    hi = float(edges[i]) if i < edges.size else math.inf
    return lo, hi


def resolves(lo: float, hi: float, shift: float) -> bool:
    """Whether no latency x in (lo, hi] has shift * x in (lo, hi] as well: hi <= shift * lo."""
    return lo > 0 and math.isfinite(hi) and hi <= shift * lo * (1 + 1e-12)


def resolving_bounds(lo: float, hi: float, shift: float) -> list[float]:
    """Bounds to add inside (lo, hi] so that no bucket there can hide a shift by `shift`.

    Geometric steps of `shift` from lo up to hi; from hi downwards for the first bucket
    (lo = 0) and from lo upwards for the overflow bucket. At most `MAX_SUGGESTED`.
    """
    out: list[float] = []
    if lo > 0:
        x = lo * shift
        while x < hi and len(out) < MAX_SUGGESTED:
            out.append(x)
            x *= shift
    else:
        x = hi / shift
        while len(out) < MAX_SUGGESTED and math.isfinite(hi):
            out.insert(0, x)
            x /= shift
    return [float(f"{v:.3g}") for v in out]


def channel_resolution(
    bounds: Sequence[float], pooled_quantile_ms: float, shift: float
) -> dict[str, object]:
    """What a latency channel reports about one tick's buckets: JSON-ready.

    `bucket_ms` is the bucket (lo, hi] the pooled quantile falls in (hi None: +Inf),
    `shift` the design shift, `resolved` whether that bucket can see it, and for an
    unresolved bucket `add_bounds_ms` (classic bounds that would resolve it) and
    `native_schema` (the smallest native-histogram schema that would).
    """
    lo, hi = bucket_of(bounds, pooled_quantile_ms)
    ok = resolves(lo, hi, shift)
    out: dict[str, object] = {
        "bucket_ms": [lo, hi if math.isfinite(hi) else None],
        "shift": shift,
        "resolved": ok,
    }
    if not ok:
        out["add_bounds_ms"] = resolving_bounds(lo, hi, shift)
        out["native_schema"] = schema_for(shift)
    return out


def resolution_text(label: str, res: dict) -> str:
    """One line for a person: the bucket a channel's quantile falls in and what would resolve it."""
    lo, hi = res["bucket_ms"]
    bucket = f"{lo:g}–{hi:g} ms" if hi is not None else f"above {lo:g} ms"
    pct = round((float(res["shift"]) - 1) * 100)
    if res["resolved"]:
        return f"{label}: the {bucket} bucket resolves a +{pct}% shift"
    fixes = []
    if res.get("add_bounds_ms"):
        fixes.append(
            "bucket bounds at " + ", ".join(f"{b:g}" for b in res["add_bounds_ms"]) + " ms"
        )
    if res.get("native_schema") is not None:
        fixes.append(f"native histograms of schema {res['native_schema']} or finer")
    return (
        f"{label}: the {bucket} bucket can hide a +{pct}% shift; "
        + " or ".join(fixes)
        + " would resolve it"
    )
