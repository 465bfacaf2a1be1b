"""Offline verifier of an audit export: `python -m audit.export.verify FILE --public-key KEY`.

Needs only this file, audit/chain/hashing.py, audit/chain/notes.py and the public key: no
Django, no database. Exit 0 when the export is intact; otherwise 1, printing the
first bad seq and what is wrong; 2 for unreadable input, and for a well-formed key
that signed none of the export's checkpoints (another log's key, or an old one),
which says nothing about the export.
"""

from __future__ import annotations

import argparse
import base64
import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from audit import chain
from audit.chain import notes
from audit.tree import merkle


class WrongKey(ValueError):
    """The key is readable but signed none of the export's checkpoints."""


# What `lines.csv_cell` puts a quote before (kept here too: the verifier needs no Django).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")


def csv_text(cell: object) -> object:
    """An event cell's text as recorded: the quote `lines.csv_cell` puts before text a
    spreadsheet would run as a formula (or that starts with a quote) taken off. A quote before
    anything else was written as it is (an export from before the quoting reads the same)."""
    if isinstance(cell, str) and cell[:1] == "'" and cell[1:].startswith(FORMULA_STARTS):
        return cell[1:]
    return cell


def _check_key(header: dict, cps: list[tuple[int, str]], name: str, key) -> None:
    """Raise WrongKey unless some checkpoint carries a signature line of (name, key)."""
    if not cps:
        return
    kid = notes.key_hash(name, notes.public_raw(key))
    for _, note in cps:
        try:
            _, signatures = notes.split_note(note)
        except notes.NoteError:
            continue  # a mangled note is the export's problem, reported by the checks
        if any(sig_name == name and blob[:4] == kid for sig_name, blob in signatures):
            return
    origin = header.get("origin")
    log = f"; the export is of the log {origin!r}" if origin and origin != name else ""
    raise WrongKey(f"none of the {len(cps)} checkpoints is signed by the key {name!r}{log}")


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


def _read(
    path: Path, proofs: list[dict] | None = None
) -> tuple[dict, list[tuple], list[tuple[int, str]]]:
    """Header, entry rows and (size, note) checkpoints of a JSONL or CSV export (its `proof`
    lines, if any, appended to `proofs`)."""
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
            elif kind == "proof" and proofs is not None:
                proofs.append(doc)
        return header, rows, cps
    for rec in csv.DictReader(text.splitlines(keepends=True)):
        if rec["type"] == "event":
            rec = {key: csv_text(value) for key, value in rec.items()}
            rows.append(_event_row(rec, int(rec["seq"]), rec["data"]))
        elif rec["type"] == "checkpoint":
            cps.append((int(rec["seq"]), rec["note"]))
    return header, rows, cps


def verify_export(path: Path, public_key_text: str) -> ExportReport:
    """Check every entry's hash and link and every checkpoint's signature and position;
    WrongKey when the key signed none of the checkpoints."""
    name, key = notes.parse_verifier_key(public_key_text)
    proofs: list[dict] = []
    header, rows, cps = _read(path, proofs)
    _check_key(header, cps, name, key)
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
    if problem is None and proofs:
        problem = _check_proofs(rows, proofs, roots)
    return ExportReport(problem is None, state.checked, len(expected), problem)


def _check_proofs(
    rows: list[tuple], proofs: list[dict], roots: dict[int, str]
) -> chain.Problem | None:
    """Each `proof` line (`proofs=1`) leads from its entry to the root signed at its size, and
    every entry has one: a segment not starting at seq 1 is checked against the signed tree too."""
    entries = {row[0]: chain.entry_bytes(*row[:8]) for row in rows}
    proved = set()
    for doc in proofs:
        seq, size = int(doc["seq"]), int(doc["size"])
        if size not in roots:
            return chain.Problem(
                seq, f"its proof is for size {size}, which no signed checkpoint here has"
            )
        if seq not in entries:
            return chain.Problem(seq, "a proof for an entry the export does not hold")
        try:
            hashes = [base64.b64decode(h, validate=True) for h in doc["proof"]]
            merkle.verify_inclusion(seq - 1, size, merkle.leaf_hash(entries[seq]), hashes,
                                    bytes.fromhex(roots[size]))  # fmt: skip
        except (ValueError, TypeError) as exc:  # ProofError is a ValueError, as is bad base64
            return chain.Problem(seq, f"not in the signed tree of size {size}: {exc}")
        proved.add(seq)
    missing = sorted(set(entries) - proved)
    if missing:
        return chain.Problem(missing[0], "the export carries proofs, but none for this entry")
    return None


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
    parser = argparse.ArgumentParser(prog="python -m audit.export.verify", description=__doc__)
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
    except WrongKey as exc:
        print(
            f"wrong public key {args.public_key}: {exc} (download this log's key from its audit "
            "page's Download public key, or GET /audit/public-key/)",
            file=sys.stderr,
        )
        return 2
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
