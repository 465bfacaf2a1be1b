"""Metrics sources: one tick of both arms as `Window`s, from Prometheus, pushes or the simulated cluster."""

from __future__ import annotations

import math
import time
import urllib.parse
from datetime import UTC, datetime
from typing import Any

import numpy as np
from django.conf import settings

from canary import prometheus, promql
from canary.faults import FaultEffect, fault_effect
from canary.models import MetricsSource, Observation, Rollout
from canary.sequential import Window
from canary.simulated_traffic import CLASSES, Simulator
from canary.traffic import ISTIO_API, canary_weight_of
from kiln.cluster.backends import get_backend
from kiln.errors import InvalidInput, Unavailable

# Latency samples kept per arm and tick. The tail channel counts the slowest 0.5% of the
# pooled samples: 60,000 per arm give it ~600 events a tick at an even split, so a busy
# service's tail is judged on all its requests (5,000 gave 50 and threw the rest away).
SAMPLE_CAP = 60_000

# Istio's standard metrics, as canary.promql templates of series selectors (placeholders filled
# per arm): the reader takes their raw samples at the tick's boundaries (canary.prometheus).
# Only the destination reporter: the source reporter counts the same requests again.
_SERVICE = (
    'reporter="destination",destination_service_name="{{service}}",'
    'destination_service_namespace="{{namespace}}"'
)


def istio_queries(series: str) -> dict[str, str]:
    """The four query templates over the series `series` selects (labels, comma-separated)."""
    return {
        "requests": "istio_requests_total{" + series + "}",
        "errors": "istio_requests_total{" + series + ',response_code=~"5.."}',
        "latency_buckets": "istio_request_duration_milliseconds_bucket{" + series + "}",
        "latency_native": "istio_request_duration_milliseconds{" + series + "}",
    }


# A rollout's arms: the service's series of one version. Chaos stop signals read the
# whole service (canary.chaos.stop_signals), across versions.
DEFAULT_QUERIES = istio_queries(_SERVICE + ',destination_version="{{version}}"')
SERVICE_QUERIES = istio_queries(_SERVICE)
QUERY_NAMES = tuple(DEFAULT_QUERIES)


class MetricsConfigError(InvalidInput):
    """A metrics source a service may not use: a query template or metrics server Kiln refuses."""

    code = "invalid_metrics"


def validate_queries(queries: Any) -> dict[str, str]:
    """The service's query templates, checked; MetricsConfigError (400) names the query refused."""
    if queries is None:
        return {}
    if not isinstance(queries, dict):
        raise MetricsConfigError("queries is an object of query templates")
    unknown = sorted(str(k) for k in set(queries) - set(QUERY_NAMES))
    if unknown:
        raise MetricsConfigError(
            f"unknown queries: {', '.join(unknown)}; the queries are {', '.join(QUERY_NAMES)}",
            extra={"fields": {"queries": [f"unknown: {', '.join(unknown)}"]}},
        )
    for name, template in queries.items():
        try:
            promql.validate(template)
        except promql.TemplateError as exc:
            raise MetricsConfigError(
                f"query {name} is not a valid template: {exc}",
                extra={"fields": {f"queries.{name}": [str(exc)]}, "query": name},
            ) from None
        if not prometheus.is_selector(template):
            reason = (
                "must be a series selector such as istio_requests_total{...}: Kiln reads its raw "
                "samples at each tick's boundaries (no increase() or rate(), no [{{window}}])"
            )
            raise MetricsConfigError(
                f"query {name} {reason}",
                extra={"fields": {f"queries.{name}": [reason]}, "query": name},
            )
    return dict(queries)


def _normal_url(url: str) -> tuple[str, str, int, str] | None:
    """(scheme, host, port, path) of an http(s) base URL with no user, query or fragment; else None."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        return None
    default = 443 if parts.scheme == "https" else 80
    return (parts.scheme, parts.hostname.lower(), port or default, parts.path.rstrip("/"))


def allowed_prometheus_urls() -> dict[tuple[str, str, int, str], str]:
    """The metrics servers of settings: KILN_PROMETHEUS_URL and KILN_PROMETHEUS_URL_ALLOWLIST."""
    urls = [getattr(settings, "KILN_PROMETHEUS_URL", "") or ""]
    urls += list(getattr(settings, "KILN_PROMETHEUS_URL_ALLOWLIST", []) or [])
    allowed = {}
    for url in urls:
        key = _normal_url(url) if url else None
        if key is not None:
            allowed.setdefault(key, url.strip())
    return allowed


def check_prometheus_url(url: str, *, required: bool) -> str:
    """The metrics server a service may name: '' (settings decide) or an allowlisted URL; else 400.

    `required`: the service reads Prometheus, so some server must be configured.
    """
    if url:
        if _normal_url(url) not in allowed_prometheus_urls():
            raise MetricsConfigError(
                "prometheus_url must be one of the metrics servers configured in "
                "KILN_PROMETHEUS_URL or KILN_PROMETHEUS_URL_ALLOWLIST (or omitted)",
                extra={"fields": {"prometheus_url": ["not an allowed metrics server"]}},
            )
        return url.strip()
    if required and not getattr(settings, "KILN_PROMETHEUS_URL", ""):
        raise MetricsConfigError(
            "a Prometheus metrics source needs a metrics server: KILN_PROMETHEUS_URL is not set",
            extra={"fields": {"metrics_source": ["no metrics server configured"]}},
        )
    return ""


def prometheus_base_url(service_url: str) -> str:
    """The server to query for a service: its allowlisted URL (checked again now) or KILN_PROMETHEUS_URL."""
    if service_url:
        allowed = allowed_prometheus_urls().get(_normal_url(service_url) or ("", "", 0, ""))
        if allowed is None:
            raise Unavailable(
                "the service's metrics server is no longer in KILN_PROMETHEUS_URL_ALLOWLIST"
            )
        return allowed
    url = getattr(settings, "KILN_PROMETHEUS_URL", "") or ""
    if not url:
        raise Unavailable("no metrics server is configured (KILN_PROMETHEUS_URL)")
    return url


def read_windows(rollout: Rollout, tick: int) -> tuple[Window, Window, int]:
    """Baseline and canary windows of 1-based `tick`, and the canary weight they were served at."""
    source = rollout.service.metrics_source
    if source == MetricsSource.SIMULATED:
        return simulated_windows(rollout, tick)
    if source == MetricsSource.PUSH:
        return pushed_windows(rollout, tick)
    if source == MetricsSource.PROMETHEUS:
        return prometheus_windows(rollout, tick)
    raise Unavailable(f"unknown metrics source {source!r}")


# --- simulated cluster ------------------------------------------------------------------


def simulated_windows(rollout: Rollout, tick: int) -> tuple[Window, Window, int]:
    """Traffic of the simulated cluster, split by the weight of the applied VirtualService."""
    service = rollout.service
    live, routing = host_virtual_services(
        get_backend(), service.namespace, service.name, service.host
    )
    weight = canary_weight_of(live)
    regression = (service.sim_regressions or {}).get(rollout.canary_version)
    sim = Simulator(
        CLASSES.get(service.sim_traffic_class, CLASSES["steady"]),
        seed=rollout.seed,
        regression=regression,
        sample_cap=SAMPLE_CAP,
    )
    data = sim.tick(tick - 1, weight)
    baseline = Window(int(data.req_b[0]), int(data.err_b[0]), data.lat_b[0])
    canary = Window(int(data.req_c[0]), int(data.err_c[0]), data.lat_c[0])
    effect = fault_effect(routing, service.host)
    if effect.error_rate or effect.added_latency_ms:
        # Injected faults hit the host's traffic before the split: both arms see them.
        rng = np.random.default_rng([rollout.seed, tick, 7])
        baseline = _with_fault(baseline, effect, rng)
        canary = _with_fault(canary, effect, rng)
    return baseline, canary, weight


def host_virtual_services(
    backend: Any, namespace: str, name: str, host: str
) -> tuple[dict | None, list[dict]]:
    """The live VirtualService `name` and every VirtualService in `namespace` that may route `host`.

    One read of the namespace's live VirtualServices whose hosts can resolve to `host`
    (any form of it starts with its first label: the backend's `routing_host`), not every
    VirtualService of the namespace; the fault reader (`canary.faults.fault_effect`) applies the exact host match.
    A second read happens only when `name` is not among them (deleting, or not routing).
    """
    items = backend.list(
        ISTIO_API, "VirtualService", namespace, include_deleting=False, routing_host=host
    )
    live = next((vs for vs in items if (vs.get("metadata") or {}).get("name") == name), None)
    if live is None:
        live = backend.get(ISTIO_API, "VirtualService", namespace, name)
    return live, items


def _with_fault(window: Window, effect: FaultEffect, rng: np.random.Generator) -> Window:
    """A window as an injected abort/delay fault leaves it: extra errors, delayed samples."""
    healthy = max(0, window.requests - window.errors)
    errors = window.errors + int(rng.binomial(healthy, min(1.0, max(0.0, effect.error_rate))))
    latencies = np.array(window.latencies_ms, dtype=float, copy=True)
    if effect.delayed_share > 0 and latencies.size:
        delay = effect.added_latency_ms / effect.delayed_share
        latencies[rng.random(latencies.size) < effect.delayed_share] += delay
    return Window(window.requests, errors, latencies)


# --- push endpoint ------------------------------------------------------------------------


def pushed_windows(rollout: Rollout, tick: int) -> tuple[Window, Window, int]:
    """Sum the observations pushed since the last tick (caller holds the rollout's row lock)."""
    pending = list(rollout.observations.filter(consumed_tick__isnull=True))
    windows = {}
    for arm in ("baseline", "canary"):
        rows = [o for o in pending if o.arm == arm]
        latencies = np.array([v for o in rows for v in o.latencies_ms], dtype=float)
        if latencies.size > SAMPLE_CAP:
            latencies = np.random.default_rng([rollout.seed, tick]).choice(
                latencies, SAMPLE_CAP, replace=False
            )
        windows[arm] = Window(sum(o.requests for o in rows), sum(o.errors for o in rows), latencies)
    Observation.objects.filter(pk__in=[o.pk for o in pending]).update(consumed_tick=tick)
    return windows["baseline"], windows["canary"], rollout.weight


# --- Prometheus HTTP API --------------------------------------------------------------
# Exact windows (canary.prometheus): tick k reads (t_{k-1}, t_k] on boundaries fixed when the
# analysis (re)started, by counter differences; every read failure is a tick without evidence.

# The decisions after which ticks run again on a fresh grid of boundaries: the analysis was
# not running before them (pending, or held inconclusive), so nothing before is owed to it.
RESUMED_BY = ("started", "retried", "extended")


def settle_seconds() -> float:
    """How long before a tick's scheduled time its window closes (KILN_PROMETHEUS_SETTLE_SECONDS)."""
    return float(getattr(settings, "KILN_PROMETHEUS_SETTLE_SECONDS", prometheus.SETTLE_SECONDS))


def query_timeout() -> float:
    """Seconds a Prometheus read may take (KILN_PROMETHEUS_TIMEOUT_SECONDS)."""
    return float(getattr(settings, "KILN_PROMETHEUS_TIMEOUT_SECONDS", prometheus.QUERY_TIMEOUT))


def tick_bounds(rollout: Rollout, tick: int) -> tuple[float, float]:
    """The window (t_{k-1}, t_k] of 1-based `tick` in unix seconds, on the grid of the last resume.

    t_k = T + (k - m) * tick_seconds - settle, where the analysis last (re)started with the
    decision recorded at time T after tick m.
    """
    resumed = (
        rollout.decisions.filter(kind__in=RESUMED_BY, tick__lt=tick)
        .order_by("-created_at", "-id")
        .values_list("created_at", "tick")
        .first()
    )
    if resumed is None:
        raise Unavailable("the rollout has not started: its analysis has no boundaries yet")
    at, after = resumed
    anchor = at.timestamp() - after * rollout.tick_seconds
    return prometheus.tick_window(anchor, rollout.tick_seconds, tick, settle_seconds())


def prometheus_windows(
    rollout: Rollout, tick: int, *, now: float | None = None
) -> tuple[Window, Window, int]:
    """Both arms' windows of `tick` read from the Prometheus HTTP API (exact, contiguous windows)."""
    service = rollout.service
    base_url = prometheus_base_url(service.prometheus_url)
    queries = {**DEFAULT_QUERIES, **(service.queries or {})}
    start, end = tick_bounds(rollout, tick)
    now = time.time() if now is None else now
    if now < end + settle_seconds():
        # Reading now would count part of this window here and the rest never.
        raise Unavailable(
            f"tick {tick} ran before its window closed ({_utc(end)} plus "
            f"{settle_seconds():g} s for the last scrape to be stored)"
        )
    arms = {}
    for arm, version in (
        ("baseline", rollout.baseline_version),
        ("canary", rollout.canary_version),
    ):
        values = {
            "service": service.name,
            "namespace": service.namespace,
            "host": service.host,
            "version": version,
            "window": f"{max(1, round(rollout.tick_seconds))}s",
        }
        try:
            arms[arm] = _read_arm(base_url, queries, values, start, end)
        except promql.TemplateError as exc:
            # A row written before templates were checked: refuse it, never evaluate it.
            raise Unavailable(f"a query of {service} cannot be rendered: {exc}") from None
        except prometheus.ReadError as exc:
            raise Unavailable(
                f"{arm} {version}, window {_utc(start)} to {_utc(end)}: {exc}"
            ) from None
    return arms["baseline"], arms["canary"], rollout.weight


def _read_arm(
    base_url: str, queries: dict[str, str], values: dict[str, str], start: float, end: float
) -> Window:
    timeout = query_timeout()

    def read(name: str) -> list[dict[str, Any]]:
        return prometheus.range_at(
            base_url, promql.render(queries[name], values), start, end, timeout
        )

    requests = prometheus.counter_total(read("requests"), start, end)
    errors = prometheus.counter_total(read("errors"), start, end)
    result = read("latency_buckets")
    if not result:
        result = read("latency_native")
    histogram = prometheus.latency_histogram(result, start, end)
    # Counter differences of integer counters are integers; anything else is not a count.
    if not (float(requests).is_integer() and float(errors).is_integer()):
        raise prometheus.ReadError(
            f"the counters rose by {requests:g} requests and {errors:g} errors: not whole counts"
        )
    requests_i = int(requests)
    if errors > requests_i:
        raise prometheus.ReadError(f"{errors:g} errors among {requests_i} requests")
    bounds = histogram.bounds()
    return Window(requests_i, int(errors), histogram.samples(SAMPLE_CAP), bounds_ms=bounds or None)


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="milliseconds")


def prometheus_min_tick(service_url: str) -> float | None:
    """The shortest tick the service's metrics server allows: its scrape interval (seconds).

    KILN_PROMETHEUS_SCRAPE_SECONDS if set, else the longest scrape interval of the server's
    active targets (/api/v1/targets); None when neither says.
    """
    configured = getattr(settings, "KILN_PROMETHEUS_SCRAPE_SECONDS", None)
    if configured:
        return float(configured)
    try:
        return prometheus.scrape_interval(prometheus_base_url(service_url), query_timeout())
    except prometheus.ReadError as exc:
        raise Unavailable(f"cannot read the scrape interval from Prometheus: {exc}") from None


def tick_seconds_errors(service: Any, tick_seconds: Any) -> list[str]:
    """Why `tick_seconds` is too short for the service's metrics (empty: it is long enough).

    A window shorter than the scrape interval holds no scrape at all on some ticks: each tick
    must span at least one interval, so every window sees the counters move.
    """
    if service.metrics_source != MetricsSource.PROMETHEUS:
        return []
    try:
        seconds = float(tick_seconds)
    except (TypeError, ValueError):
        return []
    interval = prometheus_min_tick(service.prometheus_url)
    if interval is None:
        return [
            "the metrics server reports no scrape targets, so the shortest tick is unknown: "
            "set KILN_PROMETHEUS_SCRAPE_SECONDS"
        ]
    if seconds < interval:
        smallest = math.ceil(interval)
        return [
            f"a tick of {seconds:g} s is shorter than Prometheus's scrape interval of "
            f"{interval:g} s, so some windows would hold no scrape; the smallest tick that "
            f"works is {smallest} s"
        ]
    return []
