"""An export with `proofs=1` carries each entry's inclusion proof in the last signed tree, so a
segment that does not start at seq 1 is checked offline against the signed root too."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from audit.export.lines import jsonl_lines
from audit.export.verify import verify_export
from audit.models import Checkpoint
from audit.selectors import Segment
from audit.services import public_key_path

pytestmark = pytest.mark.django_db


def _middle(tmp_path) -> tuple[list[str], object]:
    """Entries 101..300 with the checkpoints at 100, 200 and 300 and their proofs, as a file."""
    segment = Segment(101, 300, list(Checkpoint.objects.order_by("size")))
    with transaction.atomic():
        lines = list(jsonl_lines(segment, None, None, proofs=True))
    return lines, tmp_path / "middle.jsonl"


def _check(lines: list[str], path):
    path.write_text("".join(lines))
    return verify_export(path, public_key_path().read_text())


def test_a_middle_segment_s_entries_are_proved_in_the_signed_tree(log300, tmp_path):
    lines, path = _middle(tmp_path)
    proofs = [json.loads(line) for line in lines if '"type": "proof"' in line]
    assert [p["seq"] for p in proofs] == list(range(101, 301)) and {p["size"] for p in proofs} == {
        300
    }
    assert max(len(p["proof"]) for p in proofs) <= 9  # ceil(log2 300)
    report = _check(lines, path)
    assert report.ok, report.message


def test_an_entry_rewritten_with_its_hashes_recomputed_is_caught_by_its_proof(log300, tmp_path):
    lines, path = _middle(tmp_path)
    # A rewritten proof hash: the entry no longer leads to the signed root.
    at = next(i for i, line in enumerate(lines) if '"seq": 150,' in line and '"proof"' in line)
    doc = json.loads(lines[at])
    doc["proof"][0] = doc["proof"][1]
    bad = [*lines[:at], json.dumps(doc) + "\n", *lines[at + 1 :]]
    report = _check(bad, path)
    assert not report.ok and report.problem.seq == 150
    assert "not in the signed tree of size 300" in report.problem.reason


def test_a_missing_proof_is_named(log300, tmp_path):
    lines, path = _middle(tmp_path)
    kept = [line for line in lines if not ('"seq": 222,' in line and '"proof"' in line)]
    report = _check(kept, path)
    assert (
        not report.ok
        and report.problem.seq == 222
        and "none for this entry" in report.problem.reason
    )


def test_the_api_exports_proofs_in_jsonl_only(log300, api_client_for, tmp_path):
    api = api_client_for("auditor")
    response = api.get("/api/v1/audit/export", {"proofs": "1"})
    body = b"".join(response.streaming_content).decode()
    assert body.count('"type": "proof"') == 300
    path = tmp_path / "all.jsonl"
    path.write_text(body)
    assert verify_export(path, public_key_path().read_text()).ok
    for bad in ({"proofs": "1", "format": "csv"}, {"proofs": "yes"}):
        refused = api.get("/api/v1/audit/export", bad)
        assert refused.status_code == 400 and "proofs" in refused.json()["message"]
