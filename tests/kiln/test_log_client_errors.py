"""An ordinary 403 is logged as one line, without a traceback; a 500 keeps its traceback."""

from __future__ import annotations

import logging
import sys

from kiln.logging import CancelledRequestContext, ClientErrorWithoutTraceback


def _record(status: int) -> logging.LogRecord:
    try:
        raise PermissionError("no")
    except PermissionError:
        record = logging.LogRecord(
            "django.request", logging.WARNING, __file__, 1, "Forbidden", (), sys.exc_info()
        )
    record.status_code = status
    return record


def test_a_403_loses_its_traceback_and_a_500_keeps_it():
    keep = ClientErrorWithoutTraceback()
    forbidden, broken = _record(403), _record(500)
    assert keep.filter(forbidden) and keep.filter(broken)
    assert forbidden.exc_info is None
    assert broken.exc_info is not None
    assert "Traceback" in logging.Formatter().format(broken)
    assert "Traceback" not in logging.Formatter().format(forbidden)


def test_a_context_detached_after_a_cancelled_request_is_one_warning_line():
    """The configured logger, as OpenTelemetry's context module logs it."""
    from opentelemetry import context

    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger = logging.getLogger("opentelemetry.context")
    handler = Keep()
    logger.addHandler(handler)
    try:
        token = context.attach(context.set_value("k", 1))
        import contextvars

        contextvars.Context().run(context.detach, token)  # another context, as a cancelled request
        logger.error("something else", exc_info=(ValueError, ValueError("x"), None))
    finally:
        logger.removeHandler(handler)
        context.detach(token)
    detached, other = seen
    assert detached.levelname == "WARNING" and detached.exc_info is None
    assert "cancelled mid-flight" in detached.getMessage()
    assert "Traceback" not in logging.Formatter().format(detached)
    assert other.levelname == "ERROR" and other.exc_info is not None  # others pass unchanged
    assert CancelledRequestContext().filter(other)
