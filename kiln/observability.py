"""OpenTelemetry tracing and Prometheus metrics, set up once per process.

Tracing covers Django, Celery (trace context travels in task headers), psycopg
and Redis. Spans go to OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set; without
it the request and task spans still carry the trace ids that logs and audit events
record, but nothing keeps them, so the leaf spans (one per SQL statement and Redis
command) are not made at all: a span made to be dropped still costs its creation on
every statement of every request and task. Tests call `keep_spans_in_memory()` and read
`finished_spans()`; `keep_spans_in_memory(statements=True)` adds the leaf spans, as an exporter
does.

Work that outlives its request (an environment's approval, its provisioning tasks, a re-queue
by the reaper) continues the request's trace: the request's W3C `traceparent`
(`current_traceparent()`) is stored with what it created, and the later work runs inside
`continue_trace(stored, name)`, a span whose parent is the stored one (and which links to
the span that was current, e.g. the approver's own request), so every audit event the
request caused carries one trace id.

Metrics: each process counts its own. When the web runs as several processes (`uvicorn
--workers`), PROMETHEUS_MULTIPROC_DIR names a directory they all write their counts to, and
`/metrics` (`exposition()`) answers the sum of every process's, so a scrape that lands on any of
them sees the whole web. Figures read from the database when scraped (`add_scrape_collector`)
are the same in every process, so each is exported by one process kind only (the commitment by the
web, the audit writer's lag by the writer, the queue depths by beat...): `exposition(kind)`.

Names follow Prometheus conventions (`promtool check metrics` passes on every kind's output,
tests/kiln/test_metrics_exposition.py): base units, `_total` on counters, and no `_created`
series beside every counter and histogram (they doubled the series for no reader).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

disable_created_metrics()

# The process kinds, each serving /metrics, /healthz and /readyz on its own port
# (docs/operations.md#metrics-and-probes); the web's is its own HTTP port.
KINDS = ("web", "worker", "beat", "audit-writer", "scheduler-extender", "chaos-reaper")

_lock = threading.Lock()
_configured = False
_in_memory = False
_leaves = False
memory_exporter = InMemorySpanExporter()
_W3C = TraceContextTextMapPropagator()

HTTP_REQUESTS = Counter(
    "kiln_http_requests_total", "HTTP requests served", ["method", "route", "status"]
)
HTTP_LATENCY = Histogram(
    "kiln_http_request_duration_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

_scrape_collectors: dict[str, dict[type, Collector]] = {kind: {} for kind in KINDS}


def add_scrape_collector(collector: Collector, kind: str = "web") -> None:
    """Export, from the process kind `kind` only, a collector that reads its figures when scraped
    (one of each type: an app's ready() may run more than once)."""
    if kind not in _scrape_collectors:
        raise ValueError(f"unknown process kind {kind!r}; one of {', '.join(KINDS)}")
    with _lock:
        _scrape_collectors[kind].setdefault(type(collector), collector)


class _Forward(Collector):
    """Every metric of another registry (the process's default one)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self):
        """The source registry's metrics."""
        return self.source.collect()

    def describe(self) -> list:
        """Nothing: registering must not collect."""
        return []


def exposition(*kinds: str) -> bytes:
    """The Prometheus text of `/metrics` for the process kinds `kinds` (default the web): this
    process's metrics, or, under PROMETHEUS_MULTIPROC_DIR, the sum over every process that
    writes there, and the scrape-time figures those kinds export."""
    registry = CollectorRegistry(auto_describe=False)
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        MultiProcessCollector(registry, path=directory)
    else:
        registry.register(_Forward(REGISTRY))
    with _lock:
        extra = [c for kind in (kinds or ("web",)) for c in _scrape_collectors[kind].values()]
    for collector in extra:
        registry.register(collector)
    return generate_latest(registry)


def setup() -> None:
    """Install the tracer provider and the instrumentors (idempotent, thread-safe)."""
    global _configured
    with _lock:
        if _configured or not settings.KILN_TRACING:
            return
        _configured = True
        provider = TracerProvider(
            resource=Resource.create({"service.name": settings.OTEL_SERVICE_NAME})
        )
        trace.set_tracer_provider(provider)
        DjangoInstrumentor().instrument(is_sql_commentor_enabled=False)
        CeleryInstrumentor().instrument()
        if settings.OTEL_EXPORTER_OTLP_ENDPOINT:
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            _instrument_leaves()


def _instrument_leaves() -> None:
    """Spans for every SQL statement and Redis command: only where something keeps spans."""
    global _leaves
    if _leaves:
        return
    _leaves = True
    PsycopgInstrumentor().instrument(skip_dep_check=True)
    RedisInstrumentor().instrument()


def keep_spans_in_memory(*, statements: bool = False) -> None:
    """Also keep every finished span in `memory_exporter` (tests; it grows until cleared). With
    `statements`, also a span per SQL statement and Redis command, as with an exporter."""
    global _in_memory
    setup()
    with _lock:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            return
        if not _in_memory:
            provider.add_span_processor(SimpleSpanProcessor(memory_exporter))
            _in_memory = True
        if statements:
            _instrument_leaves()


def current_trace_id() -> str:
    """The current trace id as 32 hex digits, or "" outside any trace."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def current_traceparent() -> str:
    """The current span as a W3C `traceparent` header value, or "" outside any trace."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get("traceparent", "")


@contextmanager
def continue_trace(traceparent: str, name: str) -> Iterator[trace.Span]:
    """A span `name` in the trace that `traceparent` names (stored when the work began), linked
    to the span current here when that is another trace; with no valid `traceparent`, a child of
    the current span as usual."""
    parent = _W3C.extract({"traceparent": traceparent}) if traceparent else None
    stored = trace.get_current_span(parent).get_span_context() if parent is not None else None
    if stored is None or not stored.is_valid:
        with tracer().start_as_current_span(name) as span:
            yield span
        return
    here = trace.get_current_span().get_span_context()
    links = [trace.Link(here)] if here.is_valid and here.trace_id != stored.trace_id else []
    with tracer().start_as_current_span(name, context=parent, links=links) as span:
        yield span


@contextmanager
def publishing() -> Iterator[None]:
    """Around a task's publish: the trace context as it was before, whether it succeeds or not.

    Celery's instrumentation makes its publish span current before the message is sent and
    takes it off only once it has been sent. A publish that raises (the broker down past the
    retry policy) left that span current in the thread for good: every later span there, a
    worker's next tasks or a test's next requests, became its child. Here the span such a
    publish leaves is ended with the error and the context before it is current again.
    """
    before = trace.get_current_span()
    token = otel_context.attach(otel_context.get_current())
    try:
        yield
    except BaseException as exc:
        left = trace.get_current_span()
        if left is not before and left.is_recording():
            left.record_exception(exc)
            left.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            left.end()
        raise
    finally:
        otel_context.detach(token)


def tracer(name: str = "kiln") -> trace.Tracer:
    """A tracer for Kiln's own spans."""
    return trace.get_tracer(name)


def finished_spans() -> list:
    """Spans recorded by the in-memory exporter (tests)."""
    return list(memory_exporter.get_finished_spans())
