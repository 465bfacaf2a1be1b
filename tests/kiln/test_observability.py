"""OpenTelemetry: HTTP requests are traced and the audit rows they write carry the trace id."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from django.conf import settings
from opentelemetry.trace import SpanKind

from audit.models import OutboxEvent
from kiln.logging import JSONFormatter
from kiln.observability import current_trace_id, finished_spans, memory_exporter, tracer


def server_spans(route: str) -> list:
    return [
        s
        for s in finished_spans()
        if s.kind == SpanKind.SERVER and s.attributes.get("http.route") == route
    ]


@pytest.mark.django_db
def test_http_request_produces_a_django_server_span(client):
    memory_exporter.clear()
    assert client.get("/healthz").status_code == 200
    spans = server_spans("healthz")
    assert len(spans) == 1
    span = spans[0]
    assert span.name == "GET healthz"
    assert span.instrumentation_scope.name == "opentelemetry.instrumentation.django"
    assert span.attributes["http.status_code"] == 200


@pytest.mark.django_db
def test_audit_rows_written_during_a_request_carry_its_trace_id(api_client_for):
    memory_exporter.clear()
    response = api_client_for("platform-admin", sub="root").post(
        "/api/v1/teams/", {"slug": "traced", "name": "Traced"}, format="json"
    )
    assert response.status_code == 201
    (span,) = server_spans("api/v1/teams/")
    trace_id = format(span.context.trace_id, "032x")
    events = OutboxEvent.objects.filter(action__in=["kiln.user.created", "kiln.team.created"])
    assert events.count() == 2
    assert {e.trace_id for e in events} == {trace_id}

    # A second request is a different trace.
    memory_exporter.clear()
    api_client_for("platform-admin", sub="root").post(
        "/api/v1/teams/", {"slug": "traced-2", "name": "Traced 2"}, format="json"
    )
    (second,) = server_spans("api/v1/teams/")
    event = OutboxEvent.objects.get(action="kiln.team.created", data__slug="traced-2")
    assert event.trace_id == format(second.context.trace_id, "032x") != trace_id


def test_json_formatter_includes_the_trace_id_inside_a_span():
    formatter = JSONFormatter()
    record = logging.LogRecord("kiln.test", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    record.team = "payments"  # an extra= field
    outside = json.loads(formatter.format(record))
    assert "trace_id" not in outside
    with tracer("tests").start_as_current_span("unit"):
        trace_id = current_trace_id()
        inside = json.loads(formatter.format(record))
    assert len(trace_id) == 32 and int(trace_id, 16) != 0
    assert inside["trace_id"] == trace_id
    assert inside["message"] == "hello world"
    assert inside["level"] == "info"
    assert inside["logger"] == "kiln.test"
    assert inside["team"] == "payments"
    assert inside["time"].endswith("+00:00")


def test_json_formatter_renders_exceptions():
    formatter = JSONFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord(
            "kiln.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = json.loads(formatter.format(record))
    assert line["level"] == "error"
    assert "ValueError: boom" in line["exc"]


def _traced_process(script: str, **environment: str) -> str:
    """The last line `script` prints in a fresh process with tracing on and, unless given, no
    OTLP endpoint: instrumenting is for the life of a process."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "kiln.settings", "KILN_TRACING": "1"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=settings.BASE_DIR,
        env={**env, **environment},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def test_without_an_exporter_spans_carry_trace_ids_but_are_not_kept():
    """A server with no OTLP endpoint must not accumulate spans in memory."""
    script = (
        "import django; django.setup()\n"
        "from kiln import observability as o\n"
        "o.setup()\n"
        "with o.tracer().start_as_current_span('x'):\n"
        "    assert len(o.current_trace_id()) == 32\n"
        "print(len(o.finished_spans()))\n"
    )
    assert _traced_process(script) == "0"


LEAF_SCRIPT = (
    "import django; django.setup()\n"
    "from kiln import observability as o\n"
    "o.setup()\n"
    "import psycopg, redis\n"
    "print(hasattr(psycopg.connect, '__wrapped__'),"
    " hasattr(redis.Redis.execute_command, '__wrapped__'))\n"
)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [(None, "False False"), ("http://127.0.0.1:9/v1/traces", "True True")],
)
def test_statement_and_command_spans_are_made_only_where_spans_are_kept(endpoint, expected):
    """Without an exporter no span per SQL statement or Redis command is made; with one they are."""
    endpoints = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint} if endpoint else {}
    assert _traced_process(LEAF_SCRIPT, **endpoints) == expected


STATEMENT_SCRIPT = """
import json
import django
django.setup()
import redis
from django.conf import settings
from django.db import connection
from kiln import observability as o
o.keep_spans_in_memory(statements=True)
with o.tracer().start_as_current_span("work") as work:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    redis.Redis.from_url(settings.REDIS_URL).ping()
spans = [
    {"name": s.name, "system": s.attributes.get("db.system", ""),
     "same_trace": s.context.trace_id == work.get_span_context().trace_id}
    for s in o.finished_spans()
]
print(json.dumps(spans))
"""


@pytest.mark.django_db
def test_kept_statement_spans_are_made_for_sql_and_redis_in_the_callers_trace():
    """`keep_spans_in_memory(statements=True)` makes and keeps a span per SQL statement and Redis
    command, in the trace of the work that ran them, on the test database."""
    from django.db import connection

    database = connection.settings_dict
    url = (
        f"postgres://{database['USER']}:{database['PASSWORD']}@{database['HOST']}"
        f":{database['PORT']}/{database['NAME']}"
    )
    spans = json.loads(_traced_process(STATEMENT_SCRIPT, DATABASE_URL=url))
    systems = {s["system"] for s in spans if s["same_trace"]}
    assert {"postgresql", "redis"} <= systems, spans


def test_the_suite_keeps_no_statement_spans():
    """The suite keeps request and task spans but makes none per statement (tests/conftest.py)."""
    import psycopg

    assert not hasattr(psycopg.connect, "__wrapped__")
