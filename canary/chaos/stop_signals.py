"""Reading an experiment's stop-condition signals from its target service's metrics source.

The target is the experiment's service host. Its source is the canary service registered for
that host (`canary.models.Service.metrics_source`):

- Prometheus: Istio's standard series of the whole service (every version), the raw samples
  of the last KILN_CHAOS_STOP_WINDOW_SECONDS read as canary/prometheus.py reads a tick
  (counter differences, no extrapolation): errors / requests, and the 99th percentile of
  the latency histogram at its buckets' upper bounds (a conservative reading);
- push: the observations pushed for the service's rollouts in that window;
- simulated: what the faults in the simulated cluster do to the host's traffic.

A host with no registered service is read from the simulated cluster where it simulates
traffic, else from KILN_PROMETHEUS_URL (service and namespace from the host). A rollback
is read from the audit outbox. Whatever cannot be read is a `Reading` with an error, never
a zero: the judge (canary/chaos/stops.py) aborts on it unless told otherwise.

Every read is bounded by the experiment's stop-read budget (a third of its renew deadline,
at most KILN_PROMETHEUS_TIMEOUT_SECONDS): a slow source costs the controller at most that,
so its renewals stay on time. Reads are network I/O and must never hold a row lock:
`read_signal` refuses to run inside a transaction.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection
from django.utils import timezone

from audit.models import OutboxEvent
from canary import prometheus, promql
from canary.chaos.actuators import simulated_fault_effect
from canary.chaos.models import ChaosExperiment
from canary.chaos.stops import Reading, Verdict, evaluate
from canary.hosts import HostRefused, canonical_service_host
from canary.metrics import SERVICE_QUERIES, prometheus_base_url, query_timeout
from canary.models import MetricsSource, Observation, Service
from kiln.cluster.backends import get_backend
from kiln.errors import Unavailable

QUERIES = SERVICE_QUERIES
SIGNALS = ("error-rate", "latency-p99-ms", "canary-rolled-back")


def window_seconds() -> float:
    """How much recent traffic a stop condition judges (KILN_CHAOS_STOP_WINDOW_SECONDS)."""
    return float(settings.KILN_CHAOS_STOP_WINDOW_SECONDS)


def read_budget(exp: ChaosExperiment) -> float:
    """Seconds one evaluation may spend reading: a third of the renew deadline, at most the
    Prometheus timeout, so a slow source cannot make the controller miss its renewals."""
    return max(0.05, min(query_timeout(), exp.renew_deadline / 3))


def stop_conditions_check(exp: ChaosExperiment) -> Verdict:
    """Read every stop condition's signal now and judge them (canary/chaos/stops.py)."""
    deadline = time.monotonic() + read_budget(exp)
    return evaluate(
        exp.stop_conditions or [],
        lambda signal: read_signal(exp, signal, deadline=deadline),
        continue_without_metrics=exp.continue_without_metrics,
    )


def read_signal(exp: ChaosExperiment, signal: str, *, deadline: float) -> Reading:
    """One signal of the experiment's target, or a Reading saying why there is none."""
    if connection.in_atomic_block:
        raise RuntimeError("stop conditions are read outside any transaction: no I/O under a lock")
    if signal == "canary-rolled-back":
        return Reading(1.0 if _rolled_back(exp) else 0.0, "audit chain")
    if not exp.service:
        return Reading(None, "no service", error="the experiment names no service to read")
    service = _registered(exp)
    source = service.metrics_source if service is not None else None
    if source == MetricsSource.PROMETHEUS or (
        source is None
        and not get_backend().simulates_traffic
        and getattr(settings, "KILN_PROMETHEUS_URL", "")
    ):
        return _prometheus(exp, service, signal, deadline)
    if source == MetricsSource.PUSH:
        return _pushed(service, signal)
    if source == MetricsSource.SIMULATED or get_backend().simulates_traffic:
        return _simulated(exp, signal)
    return Reading(
        None,
        "no metrics source",
        error=f"{exp.service} is not a registered service and no metrics server is configured",
    )


def _registered(exp: ChaosExperiment) -> Service | None:
    """The canary service whose host is the experiment's target, if one is registered."""
    for service in Service.objects.filter(namespace=exp.namespace):
        try:
            if canonical_service_host(service.host, exp.namespace) == exp.service:
                return service
        except HostRefused:
            continue
    return None


# --- Prometheus -------------------------------------------------------------------------


def _prometheus(
    exp: ChaosExperiment, service: Service | None, signal: str, deadline: float
) -> Reading:
    try:
        base = prometheus_base_url(service.prometheus_url if service else "")
    except Unavailable as exc:
        return Reading(None, "prometheus", error=exc.message)
    source = f"prometheus {base}"
    end = time.time()
    start = end - window_seconds()
    detail = f"last {window_seconds():g} s"
    values = {
        "service": service.name if service else exp.service.split(".")[0],
        "namespace": exp.namespace,
    }

    def read(name: str) -> list[dict[str, Any]]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise prometheus.ReadError("slower than the stop-condition read budget")
        return prometheus.range_at(base, promql.render(QUERIES[name], values), start, end, left)

    try:
        if signal == "error-rate":
            requests_result = read("requests")
            if not requests_result:
                raise prometheus.ReadError("no request series for the service")
            requests = prometheus.counter_total(requests_result, start, end)
            errors = prometheus.counter_total(read("errors"), start, end)
            rate = errors / requests if requests > 0 else 0.0
            return Reading(rate, source, detail=f"{detail}, {errors:g} of {requests:g} requests")
        result = read("latency_buckets") or read("latency_native")
        if not result:
            raise prometheus.ReadError("no latency series for the service")
        histogram = prometheus.latency_histogram(result, start, end)
        if histogram.total <= 0:
            return Reading(0.0, source, detail=f"{detail}, no requests")
        p99 = float(np.quantile(histogram.samples(60_000), 0.99))
        return Reading(p99, source, detail=f"{detail}, {histogram.total:g} requests")
    except prometheus.ReadError as exc:
        return Reading(None, source, error=str(exc))


# --- push, simulated, audit ---------------------------------------------------------------


def _pushed(service: Service, signal: str) -> Reading:
    since = timezone.now() - timedelta(seconds=window_seconds())
    rows = list(
        Observation.objects.filter(rollout__service=service, received_at__gte=since).only(
            "requests", "errors", "latencies_ms"
        )
    )
    if not rows:
        return Reading(None, "push", error=f"nothing pushed in the last {window_seconds():g} s")
    if signal == "error-rate":
        requests = sum(o.requests for o in rows)
        errors = sum(o.errors for o in rows)
        return Reading(errors / requests if requests else 0.0, "push")
    latencies = [v for o in rows for v in o.latencies_ms or []]
    if not latencies:
        return Reading(None, "push", error="no latencies pushed in the window")
    return Reading(float(np.quantile(np.array(latencies, dtype=float), 0.99)), "push")


def _simulated(exp: ChaosExperiment, signal: str) -> Reading:
    """The share of the target's requests the faults in the simulated cluster fail, or the
    latency they add at p99 (a delayed share of 1% or more shows in p99)."""
    effect = simulated_fault_effect(get_backend(), exp.namespace, exp.service)
    if signal == "error-rate":
        return Reading(effect.error_rate, "simulated cluster")
    if effect.delayed_share >= 0.01:
        return Reading(effect.added_latency_ms / effect.delayed_share, "simulated cluster")
    return Reading(0.0, "simulated cluster")


def _rolled_back(exp: ChaosExperiment) -> bool:
    """A canary rollback on the target namespace recorded in the audit outbox since the start."""
    if exp.started_at is None:
        return False
    events = OutboxEvent.objects.filter(
        action__startswith="canary.rollout.rolled", recorded_at__gte=exp.started_at
    ).only("data")
    for event in events:
        data = event.data or {}
        if data.get("namespace") == exp.namespace and (
            not exp.service or _same_host(data.get("service"), exp)
        ):
            return True
    return False


def _same_host(service: Any, exp: ChaosExperiment) -> bool:
    """True if an event's service names the experiment's target (any accepted host form), or none."""
    if service in (None, ""):
        return True
    try:
        return canonical_service_host(service, exp.namespace) == exp.service
    except HostRefused:
        return service == exp.service
