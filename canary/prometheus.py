"""Exact windows from the Prometheus HTTP API: what one arm served in (t_{k-1}, t_k], counted once.

Timing invariants, written before the code that keeps them:

- Tick k of a rollout reads the window (t_{k-1}, t_k] with t_k = anchor + k * tick - settle:
  fixed boundaries on a grid set when the analysis started, so consecutive windows
  neither overlap nor leave gaps, however late a tick task runs. `settle` leaves a
  scrape taken just before t_k time to be stored before tick k (scheduled at
  anchor + k * tick or later) reads it; a tick that runs before t_k + settle reads
  nothing (ReadError) rather than a window that is still filling.
- Counts are counter differences between the last raw sample at or before t_{k-1} and
  the raw samples in (t_{k-1}, t_k], read as a range `[lookback + tick]` evaluated at
  t_k: no `increase()`, no extrapolation, so summed over ticks every scraped request
  counts exactly once. A sample lower than the one before is a counter reset (a
  restarted pod): the counter restarted from zero, so its value is the increase since.
  A series with no sample before the window was born in it (a first 5xx, a new pod) and
  counts from zero.
- Histograms are read the same way, bucket by bucket: classic buckets (`le`) per series,
  native (exponential) histograms per series as bucket (lo, hi] counts. The latency
  samples handed to the engine sit at their bucket's upper bound and carry the bounds,
  so the engine knows the resolution it judges at.

Anything else is no evidence, never a guess (ReadError with the reason): the server
down, slow past the timeout, a redirect, HTML or any answer that is not the API's JSON,
an error status, a latency series without buckets, or a window that has not closed yet.

Pure: the standard library and numpy only; the caller maps ReadError to its own error.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

SETTLE_SECONDS = (
    15.0  # a scrape is stored within its timeout (Prometheus's default 10 s) of starting
)
LOOKBACK_SECONDS = 300.0  # how far before a window to look for its opening sample (Prometheus's 5m)
QUERY_TIMEOUT = 5.0
SELECTOR = re.compile(r"\s*(?:[A-Za-z_:][A-Za-z0-9_:]*\s*)?(?:\{.*\})?\s*", re.S)


class ReadError(Exception):
    """A window that cannot be read: the reason, for the tick's record."""


@dataclass(frozen=True)
class Histogram:
    """One window's latency histogram: (lo, hi] bucket counts, and whether it is a native one."""

    counts: dict[tuple[float, float], float]
    native: bool
    edges: tuple[float, ...] = ()  # every bucket bound the series carry, counted or not

    @property
    def total(self) -> float:
        """Requests in the histogram."""
        return float(sum(self.counts.values()))

    def bounds(self) -> tuple[float, ...]:
        """Every finite, positive bucket edge: the resolution the window was read at."""
        edges = {e for b in self.counts for e in (*b, *self.edges) if math.isfinite(e) and e > 0}
        return tuple(sorted(edges))

    def samples(self, cap: int) -> np.ndarray:
        """A latency sample per request at its bucket's upper bound (the overflow bucket at twice
        its lower one); at most `cap`, in proportion to the bucket counts."""
        items = sorted(self.counts.items())
        total = self.total
        if total <= 0:
            return np.zeros(0)
        scale = min(1.0, cap / total)
        values = [hi if math.isfinite(hi) else 2 * lo for (lo, hi), _ in items]
        reps = np.round(np.array([c for _, c in items]) * scale).astype(int)
        return np.repeat(np.array(values, dtype=float), np.maximum(reps, 0))


def is_selector(template: str) -> bool:
    """Whether a query template is a plain series selector (`name{matchers}`), what the reader needs."""
    return bool(template.strip()) and SELECTOR.fullmatch(template) is not None


def tick_window(
    anchor: float, tick_seconds: float, tick: int, settle: float
) -> tuple[float, float]:
    """(t_{k-1}, t_k] of 1-based tick k, in unix seconds rounded to Prometheus's milliseconds."""
    end = anchor + tick * tick_seconds - settle
    return round(end - tick_seconds, 3), round(end, 3)


def counter_increase(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """What a counter counted in (start, end], from its raw samples (time, value) in time order.

    The opening value is the last sample at or before `start` (zero if none: the series
    was born in the window); each later sample up to `end` adds its rise over the one
    before, or its whole value after a reset (a drop: the counter restarted from zero).
    """
    previous = 0.0
    total = 0.0
    for at, value in samples:
        if not math.isfinite(value):
            continue
        if at <= start:
            previous = value
            continue
        if at > end:
            break
        total += value - previous if value >= previous else value
        previous = value
    return total


def histogram_increase(
    samples: list[tuple[float, dict[tuple[float, float], float]]], start: float, end: float
) -> dict[tuple[float, float], float]:
    """Bucket by bucket, what a native histogram counted in (start, end] (resets as for counters).

    A reset is any bucket, or the count, falling: the histogram restarted from zero.
    """
    previous: dict[tuple[float, float], float] = {}
    total: dict[tuple[float, float], float] = defaultdict(float)
    for at, buckets in samples:
        if at <= start:
            previous = buckets
            continue
        if at > end:
            break
        reset = any(buckets.get(b, 0.0) < c for b, c in previous.items())
        for bucket, count in buckets.items():
            total[bucket] += count if reset else count - previous.get(bucket, 0.0)
        previous = buckets
    return {b: c for b, c in total.items() if c > 0}


# --- the HTTP API ----------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: the configured server answers, or the read fails."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def api_get(base_url: str, path: str, params: Mapping[str, str], timeout: float) -> Any:
    """GET <base_url>/api/v1/<path>: the `data` of a successful JSON answer, else ReadError."""
    url = f"{base_url.rstrip('/')}/api/v1/{path}?" + urllib.parse.urlencode(params)
    try:
        with _OPENER.open(url, timeout=timeout) as response:  # noqa: S310 - an allowlisted URL
            ctype = response.headers.get("Content-Type", "")
            raw = response.read()
    except urllib.error.HTTPError as exc:
        # Prometheus answers 4xx/5xx with a JSON error body; anything else (a redirect, a proxy's page).
        reason = _api_error(exc.read()) if exc.code in (400, 422, 503) else ""
        raise ReadError(f"Prometheus answered HTTP {exc.code} {reason or exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise ReadError(f"Prometheus is unreachable: {getattr(exc, 'reason', exc)}") from None
    if "json" not in ctype:
        raise ReadError(f"Prometheus answered {ctype or 'no content type'}, not the API's JSON")
    try:
        body = json.loads(raw.decode())
    except ValueError:
        raise ReadError("Prometheus answered something that is not JSON") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        raise ReadError(f"Prometheus answered an error: {_api_error(raw) or 'no status'}")
    return body.get("data")


def _api_error(raw: bytes) -> str:
    try:
        body = json.loads(raw.decode())
        return f"{body.get('errorType')}: {body.get('error')}"[:300]
    except (ValueError, AttributeError):
        return ""


def range_at(
    base_url: str, selector: str, start: float, end: float, timeout: float = QUERY_TIMEOUT
) -> list[dict[str, Any]]:
    """Every raw sample of `selector`'s series in [start - LOOKBACK, end], evaluated at `end`."""
    if not is_selector(selector):
        raise ReadError("the query is not a series selector: Kiln reads raw samples of a counter")
    span_ms = int(round((end - start + LOOKBACK_SECONDS) * 1000))
    data = api_get(
        base_url,
        "query",
        {"query": f"{selector}[{span_ms}ms]", "time": f"{end:.3f}"},
        timeout,
    )
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise ReadError(f"expected a range of raw samples, got {kind!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise ReadError("the answer holds no result list")
    return result


def _float_samples(series: dict[str, Any]) -> list[tuple[float, float]]:
    try:
        return [(float(t), float(v)) for t, v in series.get("values") or []]
    except (TypeError, ValueError):
        raise ReadError("a series holds samples that are not numbers") from None


def counter_total(result: list[dict[str, Any]], start: float, end: float) -> float:
    """The increase of every series in (start, end], summed; ReadError if none was scraped in it,
    or if the series come from several Istio reporters (the same requests counted twice).

    A series seen before the window but not in it is skipped when others were scraped (a
    deleted pod, a response code no longer served); when none was, the target is down or
    its series are stale, and zero would be a guess, not a count.
    """
    reporters = {(s.get("metric") or {}).get("reporter") for s in result} - {None}
    if len(reporters) > 1:
        # Istio reports each request from both ends of the call: summing them counts it twice.
        raise ReadError(
            f"the query matches series of several Istio reporters ({', '.join(sorted(reporters))}):"
            ' each request would count more than once; filter on reporter="destination"'
        )
    series = [_float_samples(s) for s in result]
    inside = [any(start < at <= end for at, _ in s) for s in series]
    if series and not any(inside):
        raise ReadError(
            "no series was scraped in the window: the target is down or its series are stale"
        )
    return sum(counter_increase(s, start, end) for s in series)


def classic_histogram(result: list[dict[str, Any]], start: float, end: float) -> Histogram:
    """Per bucket (lo, hi] what classic `le` series counted in (start, end], over every series."""
    by_le: dict[float, float] = defaultdict(float)
    for series in result:
        le = (series.get("metric") or {}).get("le")
        if le is None:
            raise ReadError("a latency series has no `le` label: not a histogram's buckets")
        try:
            bound = float(le)
        except ValueError:
            raise ReadError(f"a latency series has le={le!r}") from None
        by_le[bound] += counter_increase(_float_samples(series), start, end)
    counts: dict[tuple[float, float], float] = {}
    lo, below = 0.0, 0.0
    for bound in sorted(by_le):
        cumulative = max(by_le[bound], below)  # buckets are cumulative: never fewer than below
        if cumulative > below:
            counts[(lo, bound)] = cumulative - below
        lo, below = bound, cumulative
    return Histogram(counts, native=False, edges=tuple(sorted(by_le)))


def native_histogram(result: list[dict[str, Any]], start: float, end: float) -> Histogram:
    """Per native bucket (lo, hi] what the series' native histograms counted in (start, end]."""
    total: dict[tuple[float, float], float] = defaultdict(float)
    for series in result:
        samples = []
        for at, hist in series.get("histograms") or []:
            buckets = {}
            for _rule, lo, hi, count in (hist or {}).get("buckets") or []:
                buckets[(float(lo), float(hi))] = float(count)
            samples.append((float(at), buckets))
        for bucket, count in histogram_increase(samples, start, end).items():
            total[bucket] += count
    # Negative and zero buckets hold no latency Kiln can tell apart: they sit at zero.
    counts = {(max(lo, 0.0), max(hi, 0.0)): c for (lo, hi), c in total.items()}
    return Histogram(counts, native=True)


def latency_histogram(result: list[dict[str, Any]], start: float, end: float) -> Histogram:
    """The window's histogram from either kind of series: native where they carry histograms."""
    if any(s.get("histograms") for s in result):
        return native_histogram(result, start, end)
    return classic_histogram(result, start, end)


def scrape_interval(base_url: str, timeout: float = QUERY_TIMEOUT) -> float | None:
    """The longest scrape interval of the server's active targets (seconds), None if it has none."""
    data = api_get(base_url, "targets", {"state": "active"}, timeout)
    intervals = []
    for target in (data or {}).get("activeTargets") or []:
        seconds = parse_duration(str(target.get("scrapeInterval", "")))
        if seconds:
            intervals.append(seconds)
    return max(intervals) if intervals else None


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w|y)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: str) -> float | None:
    """Seconds in a Prometheus duration such as 15s or 1m30s; None if it is not one."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT[u] for n, u in parts)
