"""Metrics sources: one tick of both arms as `Window`s, from Prometheus, pushes or the simulated cluster."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import numpy as np
from django.conf import settings

from canary import promql
from canary.extensions import FaultEffect, traffic_faults
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

# Istio's standard metrics, as canary.promql templates (placeholders filled per arm and tick).
DEFAULT_QUERIES = {
    "requests": 'sum(increase(istio_requests_total{destination_service_name="{{service}}",'
    'destination_service_namespace="{{namespace}}",destination_version="{{version}}"}'
    "[{{window}}]))",
    "errors": 'sum(increase(istio_requests_total{destination_service_name="{{service}}",'
    'destination_service_namespace="{{namespace}}",destination_version="{{version}}",'
    'response_code=~"5.."}[{{window}}]))',
    "latency_buckets": "sum by (le) (increase(istio_request_duration_milliseconds_bucket{"
    'destination_service_name="{{service}}",destination_service_namespace="{{namespace}}",'
    'destination_version="{{version}}"}[{{window}}]))',
}
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
        return prometheus_windows(rollout)
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
    effect = traffic_faults(routing, service.host)
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
    VirtualService of the namespace; the installed fault reader (`canary.extensions.traffic_faults`) applies the exact host match.
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


def prometheus_windows(rollout: Rollout) -> tuple[Window, Window, int]:
    """Query the Prometheus HTTP API (/api/v1/query) for both arms over the last tick."""
    service = rollout.service
    base_url = prometheus_base_url(service.prometheus_url)
    queries = {**DEFAULT_QUERIES, **(service.queries or {})}
    window = f"{max(1, round(rollout.tick_seconds))}s"
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
            "window": window,
        }
        promqls = {}
        for name in QUERY_NAMES:
            try:
                promqls[name] = promql.render(queries[name], values)
            except promql.TemplateError as exc:
                # A row written before templates were checked: refuse it, never evaluate it.
                raise Unavailable(f"query {name} of {service} cannot be rendered: {exc}") from None
        requests = _scalar(prometheus_query(base_url, promqls["requests"]))
        errors = _scalar(prometheus_query(base_url, promqls["errors"]))
        buckets = prometheus_query(base_url, promqls["latency_buckets"])
        requests_i = int(round(requests))
        arms[arm] = Window(
            requests_i, min(int(round(errors)), requests_i), samples_from_buckets(buckets)
        )
    return arms["baseline"], arms["canary"], rollout.weight


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: the configured server answers, or the query fails."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def prometheus_query(base_url: str, promql: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Run an instant query; return the result vector or raise Unavailable."""
    if not base_url:
        raise Unavailable("the service has no Prometheus URL")
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with _OPENER.open(url, timeout=timeout) as response:  # noqa: S310 - a URL from settings
            body = json.loads(response.read().decode())
    except (urllib.error.URLError, TimeoutError, ValueError) as exc:
        raise Unavailable(f"Prometheus query failed: {exc}") from exc
    if body.get("status") != "success":
        raise Unavailable(f"Prometheus answered {body.get('errorType')}: {body.get('error')}")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise Unavailable(f"expected a vector result, got {data.get('resultType')!r}")
    return data.get("result") or []


def _scalar(result: list[dict[str, Any]]) -> float:
    """Sum of a vector's sample values (an empty vector is 0: no traffic)."""
    total = 0.0
    for sample in result:
        value = float(sample["value"][1])
        if np.isfinite(value):
            total += value
    return max(total, 0.0)


def samples_from_buckets(result: list[dict[str, Any]], cap: int = SAMPLE_CAP) -> np.ndarray:
    """Latency samples (ms) from cumulative histogram buckets: each bucket's count at its bound.

    The rank statistics only need order, and ties at a bound are shared fairly by
    `latency_counts`; the +Inf bucket sits at twice the largest finite bound. At
    most `cap` samples, in proportion to the bucket counts.
    """
    bounds = []
    for sample in result:
        le = sample.get("metric", {}).get("le")
        if le is None:
            continue
        bounds.append((float(le), max(float(sample["value"][1]), 0.0)))
    if not bounds:
        return np.zeros(0)
    bounds.sort()
    finite = [b for b, _ in bounds if np.isfinite(b)]
    top = 2 * finite[-1] if finite else 1.0
    counts = np.diff([0.0] + [c for _, c in bounds])
    counts = np.maximum(counts, 0)
    total = counts.sum()
    if total <= 0:
        return np.zeros(0)
    scale = min(1.0, cap / total)
    reps = np.round(counts * scale).astype(int)
    values = [b if np.isfinite(b) else top for b, _ in bounds]
    return np.repeat(np.array(values, dtype=float), reps)
