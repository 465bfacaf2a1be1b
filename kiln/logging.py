"""Structured logs: one JSON object per line, with the current trace id when there is one."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from kiln.observability import current_trace_id

_RESERVED = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """Format a record as JSON: time, level, logger, message, trace_id and any `extra=` fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        trace_id = current_trace_id()
        if trace_id:
            payload["trace_id"] = trace_id
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


class ClientErrorWithoutTraceback(logging.Filter):
    """Django logs a refused request (403, 404, 400) with the exception's traceback; for a
    client's error the one line says all there is, so the traceback is dropped (5xx keep it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info = None
            record.exc_text = None
        return True


class CancelledRequestContext(logging.Filter):
    """OpenTelemetry logs "Failed to detach context" with a traceback when a request's span
    context is detached in another context than it was attached in: under ASGI that happens to a
    request the client abandoned mid-flight (a page left while it polls), whose span still ends.
    That is one warning line, not an error with a traceback; anything else passes unchanged."""

    MESSAGE = "Failed to detach context"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() == self.MESSAGE and record.exc_info:
            exc = record.exc_info[1]
            record.msg = f"{self.MESSAGE} (a request cancelled mid-flight): {exc!r}"
            record.args = ()
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
