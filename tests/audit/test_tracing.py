"""One OpenTelemetry trace covers the HTTP request, the Celery task it enqueued and the audit row."""

from __future__ import annotations

import time

import pytest
from opentelemetry.trace import SpanKind

from audit.models import ChainEvent, OutboxEvent
from kiln.celery import app
from kiln.observability import finished_spans, memory_exporter
from tests.audit.conftest import drain
from tests.support.celery_worker import in_process_worker


@pytest.mark.django_db(transaction=True)
def test_http_request_celery_task_and_chain_row_share_one_trace(
    settings, committed_chain, api_client_for
):
    settings.KILN_AUDIT_RELAY_ON_COMMIT = True  # on commit, enqueue the relay task
    app.control.purge()  # wake-ups left in this Redis database by earlier runs
    memory_exporter.clear()
    with in_process_worker(app):
        response = api_client_for("auditor", sub="ivy").get("/api/v1/audit/export")
        assert response.status_code == 200
        b"".join(response.streaming_content)
        exported = OutboxEvent.objects.get(action="audit.export.created")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if OutboxEvent.objects.filter(pk=exported.pk, published_at__isnull=False).exists():
                break
            time.sleep(0.05)
        else:
            pytest.fail("the relay task enqueued on commit never ran")
    drain()
    row = ChainEvent.objects.get(action="audit.export.created")

    spans = finished_spans()
    http = [
        s
        for s in spans
        if s.kind == SpanKind.SERVER
        and "audit/export" in str(s.attributes.get("http.route", "")) + s.name
    ]
    task = [
        s for s in spans if s.kind == SpanKind.CONSUMER and "audit.tasks.relay_outbox" in s.name
    ]
    assert http, [s.name for s in spans]
    assert task, [s.name for s in spans]
    trace_id = http[0].context.trace_id
    # One wake-up per committed transaction of the request (the export, and the JWT user's first sight).
    assert {t.context.trace_id for t in task} == {trace_id}
    assert task[0].parent is not None  # continued from the enqueuing request, not a new root
    assert row.trace_id == format(trace_id, "032x")
