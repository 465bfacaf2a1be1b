"""An ordinary 403 is logged as one line, without a traceback; a 500 keeps its traceback."""

from __future__ import annotations

import logging
import sys

from kiln.logging import ClientErrorWithoutTraceback


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
