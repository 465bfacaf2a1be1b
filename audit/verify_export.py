"""Offline verifier of an audit export: `python -m audit.verify_export FILE --public-key KEY`.

Needs only this file, audit/chain.py, audit/notes.py and the public key: no
Django, no database. Exit 0 when the export is intact; otherwise 1, printing the
first bad seq and what is wrong (2 for unreadable input).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from audit import chain, merkle, notes


@dataclass
class ExportReport:
    """Outcome of verifying an export."""

    ok: bool
    checked: int
    checkpoints: int
    problem: chain.Problem | None

    @property
    def message(self) -> str:
        return str(self.problem) if self.problem else f"intact: {self.checked} entries"


def _event_row(fields: dict, seq: int, data: str) -> tuple:
    """An exported entry as the row `chain.verify_rows` reads; `data` is its canonical text."""
    given = {**fields, "seq": seq, "data": data}
    return tuple(given[column] for column in chain.ROW_COLUMNS)


def _read(path: Path) -> tuple[dict, list[tuple], list[tuple[int, str]]]:
    """Header, entry rows and (size, note) checkpoints of a JSONL or CSV export."""
    text = path.read_text(encoding="utf-8")
    header: dict = {}
    rows: list[tuple] = []
    cps: list[tuple[int, str]] = []
    if text.startswith("{"):
        for line in text.splitlines():
            if not line.strip():
                continue
            doc = json.loads(line)
            kind = doc.get("type")
            if kind == "header":
                header = doc
            elif kind == "event":
                rows.append(_event_row(doc, doc["seq"], chain.canonical_data(doc["data"])))
            elif kind == "checkpoint":
                cps.append((int(doc["size"]), doc["note"]))
        return header, rows, cps
    for rec in csv.DictReader(text.splitlines(keepends=True)):
        if rec["type"] == "event":
            rows.append(_event_row(rec, int(rec["seq"]), rec["data"]))
        elif rec["type"] == "checkpoint":
            cps.append((int(rec["seq"]), rec["note"]))
    return header, rows, cps


def verify_export(path: Path, public_key_text: str) -> ExportReport:
    """Check every entry's hash and link and every checkpoint's signature and position."""
    name, key = notes.parse_verifier_key(public_key_text)
    header, rows, cps = _read(path)
    expected: dict[int, str] = {}
    roots: dict[int, str] = {}
    problem: chain.Problem | None = None
    for size, note in cps:
        try:
            cp = notes.verify(note, name, key)
        except notes.NoteError as exc:
            problem = problem or chain.Problem(max(size, 1), f"checkpoint {size}: {exc}")
            continue
        if cp.size != size or expected.get(cp.size, cp.head_hash) != cp.head_hash:
            problem = problem or chain.Problem(
                cp.size, f"checkpoint {size} does not match its signed content"
            )
            continue
        expected[cp.size] = cp.head_hash
        if cp.root_hash:
            roots[cp.size] = cp.root_hash
    state, row_problem = chain.verify_rows(rows, expect_hash_at=expected, segment=True)
    if row_problem and (problem is None or row_problem.seq <= problem.seq):
        problem = row_problem
    if problem is None and rows:
        first, last = rows[0][0], state.last_seq
        if header.get("first_seq") not in (None, first):
            problem = chain.Problem(
                header["first_seq"], "export does not start where its header says"
            )
        elif header.get("last_seq") not in (None, last):
            problem = chain.Problem(
                last + 1,
                f"truncated: the header ends at seq {header['last_seq']}, the entries at {last}",
            )
        elif last not in expected:
            problem = chain.Problem(last, "the last entry is not covered by a signed checkpoint")
        elif first > 1 and (first - 1) not in expected:
            problem = chain.Problem(
                first, "the first entry's prev_hash is not vouched for by a checkpoint"
            )
        else:
            problem = chain.check_checkpoint_sizes(last, [s for s in expected if s >= first - 1])
    if problem is None and rows and rows[0][0] == 1:
        problem = _check_tree(rows, roots)
    return ExportReport(problem is None, state.checked, len(expected), problem)


def _check_tree(rows: list[tuple], roots: dict[int, str]) -> chain.Problem | None:
    """An export from seq 1 rebuilds the Merkle tree: each signed root must be the tree's at its size."""
    source = merkle.memory_source([merkle.leaf_hash(chain.entry_bytes(*row[:8])) for row in rows])
    for size in sorted(s for s in roots if s <= len(rows)):
        if merkle.root(source, size).hex() != roots[size]:
            return chain.Problem(
                size, f"checkpoint {size}: its Merkle root is not the tree of entries 1..{size}"
            )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m audit.verify_export", description=__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument(
        "--public-key", required=True, type=Path, help="verifier key or Ed25519 PEM"
    )
    args = parser.parse_args(argv)
    # The key is read and parsed first, so a wrong key is never reported as a bad export.
    try:
        key_text = args.public_key.read_text(encoding="utf-8")
        notes.parse_verifier_key(key_text)
    except (OSError, UnicodeError, ValueError, notes.NoteError) as exc:
        print(
            f"cannot read the public key {args.public_key}: {exc} (download it from the audit "
            "page's Download public key, or GET /audit/public-key/)",
            file=sys.stderr,
        )
        return 2
    try:
        report = verify_export(args.file, key_text)
    except (OSError, ValueError, KeyError, notes.NoteError) as exc:
        print(f"cannot read the export {args.file}: {exc}", file=sys.stderr)
        return 2
    if report.ok:
        print(f"export intact: {report.checked} entries, {report.checkpoints} signed checkpoints")
        return 0
    print(f"export BROKEN at seq {report.problem.seq}: {report.problem.reason}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
