"""Export of a chain segment as JSONL (or CSV) with the signed checkpoints that cover it."""

from __future__ import annotations

import base64
import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db import transaction

from audit import chain
from audit.chain.verification import iter_rows
from audit.selectors import Segment, cosigned_note, tree_source
from audit.tree import merkle

CSV_COLUMNS = ("type", *chain.ROW_COLUMNS, "note")
# A text cell a spreadsheet would run as a formula (an actor named =HYPERLINK(...)) starts
# with a quote, and so does one that starts with a quote already, so that the verifier takes
# exactly one off (`verify.csv_text`, which reads an export without Django and keeps its own
# copy of these starts): what is hashed is the text as recorded.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")


def csv_cell(value: object) -> object:
    """`value` as a CSV cell: text a spreadsheet would run as a formula behind a quote."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _header(segment: Segment | None, since: datetime | None, until: datetime | None) -> dict:
    return {
        "type": "header",
        "format": "kiln-audit-export/1",
        "origin": settings.KILN_AUDIT_ORIGIN,
        "from": since.isoformat() if since else None,
        "to": until.isoformat() if until else None,
        "first_seq": segment.first_seq if segment else None,
        "last_seq": segment.last_seq if segment else None,
        # Newer entries in the range that no checkpoint signs yet, left out of this export.
        "unsigned_after_last": segment.unsigned if segment else 0,
    }


def _rows(segment: Segment) -> Iterator[tuple]:
    with transaction.atomic():
        for chunk in iter_rows(segment.first_seq, segment.last_seq):
            yield from chunk


def _event_line(row: tuple) -> str:
    """One entry as an export line: its canonical entry (the hashed bytes), with `type` and the
    two hashes around it, so the line minus those three keys is exactly what was hashed."""
    seq, event_id, recorded_at, actor, action, target, data, trace_id, prev_hash, digest = row
    entry = chain.entry_bytes(seq, event_id, recorded_at, actor, action, target, data, trace_id)
    # prev_hash and hash are 64 hex digits: nothing in them needs escaping.
    return (
        f'{{"type":"event",{entry.decode()[1:-1]},"prev_hash":"{prev_hash}","hash":"{digest}"}}\n'
    )


def jsonl_lines(
    segment: Segment | None, since: datetime | None, until: datetime | None, proofs: bool = False
) -> Iterator[str]:
    """The export as JSON lines: a header, the entries in seq order, then the checkpoints; with
    `proofs`, each entry's inclusion proof in the newest signed tree the segment ends at."""
    yield json.dumps(_header(segment, since, until)) + "\n"
    if segment is None:
        return
    for row in _rows(segment):
        yield _event_line(row)
    for cp in segment.checkpoints:
        yield (
            json.dumps(
                {
                    "type": "checkpoint",
                    "size": cp.size,
                    "hash": cp.head_hash,
                    "note": cosigned_note(cp),
                }  # fmt: skip
            )
            + "\n"
        )
    if proofs:
        yield from _proof_lines(segment)


def _proof_lines(segment: Segment) -> Iterator[str]:
    """One `proof` line an entry: its RFC 9162 inclusion proof in the tree of the segment's last
    checkpoint with a root (none when no such checkpoint covers the segment's end)."""
    signed = [cp for cp in segment.checkpoints if cp.root_hash and cp.size >= segment.last_seq]
    if not signed:
        return
    size, source = signed[-1].size, tree_source()
    for seq in range(segment.first_seq, segment.last_seq + 1):
        proof = [
            base64.b64encode(h).decode("ascii")
            for h in merkle.inclusion_proof(source, seq - 1, size)
        ]
        yield json.dumps({"type": "proof", "seq": seq, "size": size, "proof": proof}) + "\n"


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
        writer.writerow(("event", *(csv_cell(value) for value in row), ""))
        if n % 500 == 499:
            yield flush()
    for cp in segment.checkpoints:
        writer.writerow(
            ("checkpoint", cp.size, "", "", "", "", "", "", "", "", cp.head_hash, cosigned_note(cp))
        )
    yield flush()
