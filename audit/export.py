"""Export of a chain segment as JSONL (or CSV) with the signed checkpoints that cover it."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db import transaction

from audit.selectors import Segment
from audit.verification import iter_rows

CSV_COLUMNS = (
    "type",
    "seq",
    "event_id",
    "recorded_at",
    "actor",
    "action",
    "target",
    "data",
    "trace_id",
    "prev_hash",
    "hash",
    "note",
)


def _header(segment: Segment | None, since: datetime | None, until: datetime | None) -> dict:
    return {
        "type": "header",
        "format": "kiln-audit-export/1",
        "origin": settings.KILN_AUDIT_ORIGIN,
        "from": since.isoformat() if since else None,
        "to": until.isoformat() if until else None,
        "first_seq": segment.first_seq if segment else None,
        "last_seq": segment.last_seq if segment else None,
    }


def _rows(segment: Segment) -> Iterator[tuple]:
    with transaction.atomic():
        for chunk in iter_rows(segment.first_seq, segment.last_seq):
            yield from chunk


def jsonl_lines(
    segment: Segment | None, since: datetime | None, until: datetime | None
) -> Iterator[str]:
    """The export as JSON lines: a header, the entries in seq order, then the checkpoints."""
    yield json.dumps(_header(segment, since, until)) + "\n"
    if segment is None:
        return
    dumps = json.dumps
    for seq, event_id, recorded_at, actor, action, target, data, trace_id, prev, digest in _rows(
        segment
    ):
        # `data` is embedded as its stored canonical text, byte for byte.
        yield (
            f'{{"type":"event","seq":{seq},"event_id":{dumps(event_id)},'
            f'"recorded_at":{dumps(recorded_at)},"actor":{dumps(actor)},"action":{dumps(action)},'
            f'"target":{dumps(target)},"data":{data},"trace_id":{dumps(trace_id)},'
            f'"prev_hash":{dumps(prev)},"hash":{dumps(digest)}}}\n'
        )
    for cp in segment.checkpoints:
        yield (
            dumps({"type": "checkpoint", "size": cp.size, "hash": cp.head_hash, "note": cp.note})
            + "\n"
        )


def csv_lines(
    segment: Segment | None, since: datetime | None, until: datetime | None
) -> Iterator[str]:
    """The export as CSV: one row per entry, then one per checkpoint (`type` says which)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    writer.writerow(CSV_COLUMNS)
    yield flush()
    if segment is None:
        return
    for n, row in enumerate(_rows(segment)):
        writer.writerow(("event", *row, ""))
        if n % 500 == 499:
            yield flush()
    for cp in segment.checkpoints:
        writer.writerow(
            ("checkpoint", cp.size, "", "", "", "", "", "", "", "", cp.head_hash, cp.note)
        )
    yield flush()
