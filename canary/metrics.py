"""Metrics sources: one tick of both arms as `Window`s, from Prometheus, pushes or the simulated cluster."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import numpy as np

from canary.actuators import FaultEffect, fault_effect
from canary.models import MetricsSource, Observation, Rollout
from canary.sequential import Window
from canary.simulate import CLASSES, Simulator
from canary.traffic import ISTIO_API, canary_weight_of
from kiln.errors import Unavailable

SAMPLE_CAP = 250

# Istio's standard metrics; {service}, {namespace}, {version} and {window} are substituted.
DEFAULT_QUERIES = {
    "requests": 'sum(increase(istio_requests_total{{destination_service_name="{service}",'
    'destination_service_namespace="{namespace}",destination_version="{version}"}}[{window}]))',
    "errors": 'sum(increase(istio_requests_total{{destination_service_name="{service}",'
    'destination_service_namespace="{namespace}",destination_version="{version}",'
    'response_code=~"5.."}}[{window}]))',
    "latency_buckets": "sum by (le) (increase(istio_request_duration_milliseconds_bucket{{"
    'destination_service_name="{service}",destination_service_namespace="{namespace}",'
    'destination_version="{version}"}}[{window}]))',
}


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
    from portal.delivery import get_backend

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

    One read of the namespace's VirtualServices per tick. On the simulated cluster the
    database returns only the ones whose hosts can resolve to `host` (any form of it
    starts with its first label) instead of every VirtualService of the namespace;
    `fault_effect` then applies the exact host match.
    """
    from portal.delivery.simulated import SimulatedBackend

    if isinstance(backend, SimulatedBackend):
        items = _simulated_host_virtual_services(backend, namespace, name, host)
    else:
        items = backend.list(ISTIO_API, "VirtualService", namespace)
    live = next((vs for vs in items if (vs.get("metadata") or {}).get("name") == name), None)
    if live is not None and (live.get("metadata") or {}).get("deletionTimestamp"):
        live = backend.get(ISTIO_API, "VirtualService", namespace, name)
    return live, items


def _simulated_host_virtual_services(
    backend: Any, namespace: str, name: str, host: str
) -> list[dict]:
    from django.db.models import Q

    from portal.models import SimulatedObject

    label = host.strip().lower().split(".", 1)[0]
    hosts = rf'"\s*{re.escape(label)}(\.|\s*")'
    rows = SimulatedObject.objects.filter(
        Q(name=name) | Q(manifest__spec__hosts__iregex=hosts),
        api_version=ISTIO_API,
        kind="VirtualService",
        namespace=namespace,
    ).order_by("name")
    return [backend._render(o) for o in rows]


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
    queries = {**DEFAULT_QUERIES, **(service.queries or {})}
    window = f"{max(1, round(rollout.tick_seconds))}s"
    arms = {}
    for arm, version in (
        ("baseline", rollout.baseline_version),
        ("canary", rollout.canary_version),
    ):
        params = {
            "service": service.name,
            "namespace": service.namespace,
            "version": version,
            "window": window,
        }
        requests = _scalar(
            prometheus_query(service.prometheus_url, queries["requests"].format(**params))
        )
        errors = _scalar(
            prometheus_query(service.prometheus_url, queries["errors"].format(**params))
        )
        buckets = prometheus_query(
            service.prometheus_url, queries["latency_buckets"].format(**params)
        )
        requests_i = int(round(requests))
        arms[arm] = Window(
            requests_i, min(int(round(errors)), requests_i), samples_from_buckets(buckets)
        )
    return arms["baseline"], arms["canary"], rollout.weight


def prometheus_query(base_url: str, promql: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Run an instant query; return the result vector or raise Unavailable."""
    if not base_url:
        raise Unavailable("the service has no Prometheus URL")
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - configured URL
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
