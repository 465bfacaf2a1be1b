"""Tampering through raw SQL with the triggers disabled is caught by audit_verify and by the
offline export verifier, each naming the first bad seq."""

from __future__ import annotations

# ruff: noqa: S608 - SQL built from module constants
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from audit import chain, record
from audit.models import ChainEvent, VerificationRun
from audit.services import public_key_path
from tests.audit.conftest import drain

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def chain30():
    for i in range(30):
        record(f"user{i % 3}", "portal.environment.approved", f"env:{i}", {"i": i, "note": "ok"})
    drain()
    assert ChainEvent.objects.count() == 30


def run_audit_verify() -> tuple[int, dict]:
    out = io.StringIO()
    try:
        call_command("audit_verify", "--json", stdout=out)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, json.loads(out.getvalue())


def run_export_verify(api_client_for, tmp_path: Path) -> subprocess.CompletedProcess:
    response = api_client_for("auditor", sub="ivy").get("/api/v1/audit/export")
    assert response.status_code == 200
    export = tmp_path / "export.jsonl"
    export.write_bytes(b"".join(response.streaming_content))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "audit.export.verify",
            str(export),
            "--public-key",
            str(public_key_path()),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )


def forge_row(seq: int) -> list[tuple[str, list]]:
    """Shift seq >= `seq` up by one and insert a well-formed forged entry at `seq`."""
    prev = ChainEvent.objects.get(seq=seq - 1).hash
    forged = next(
        chain.build_entries(
            seq - 1,
            prev,
            [
                (
                    "00000000-0000-4000-8000-000000000001",
                    "2026-01-01T00:00:00.000000Z",
                    "mallory",
                    "portal.environment.approved",
                    "env:forged",
                    '{"i":-1}',
                    "",
                )
            ],
        )
    )
    cols = "seq, event_id, recorded_at, actor, action, target, data, trace_id, prev_hash, hash"
    return [
        ("UPDATE audit_chainevent SET seq = seq + 1000 WHERE seq >= %s", [seq]),
        ("UPDATE audit_chainevent SET seq = seq - 999 WHERE seq >= 1000", []),
        (
            f"INSERT INTO audit_chainevent ({cols}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            list(forged.as_row()),
        ),
    ]


CASES = {
    "edited-row": (
        lambda: [("UPDATE audit_chainevent SET actor = 'mallory' WHERE seq = 10", [])],
        10,
        "contents",
    ),
    "edited-data": (
        lambda: [
            ("""UPDATE audit_chainevent SET data = '{"i":9,"note":"no"}' WHERE seq = 10""", [])
        ],
        10,
        "contents",
    ),
    "deleted-row": (lambda: [("DELETE FROM audit_chainevent WHERE seq = 10", [])], 10, "missing"),
    "swapped-rows": (
        lambda: [
            ("UPDATE audit_chainevent SET seq = -1 WHERE seq = 10", []),
            ("UPDATE audit_chainevent SET seq = 10 WHERE seq = 11", []),
            ("UPDATE audit_chainevent SET seq = 11 WHERE seq = -1", []),
        ],
        10,
        "link",
    ),
    "forged-row-inserted": (lambda: forge_row(10), 10, "inserted"),
    "tail-truncated": (
        lambda: [("DELETE FROM audit_chainevent WHERE seq > 25", [])],
        26,
        "truncated",
    ),
}


def test_intact_chain_passes_both_verifiers_and_the_run_is_stored(
    chain30, api_client_for, tmp_path
):
    code, report = run_audit_verify()
    assert (
        code == 0 and report["ok"] and report["checked"] == 30 and report["first_bad_seq"] is None
    )
    assert VerificationRun.objects.get().ok is True
    result = run_export_verify(api_client_for, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "intact: 30 entries" in result.stdout or "intact" in result.stdout


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_tampering_is_caught_by_both_verifiers_naming_the_seq(
    case, chain30, tamper, api_client_for, tmp_path
):
    statements, bad_seq, word = CASES[case]
    tamper(*statements())
    code, report = run_audit_verify()
    assert code == 1
    assert report["first_bad_seq"] == bad_seq, report
    assert word in report["problem"]
    run = VerificationRun.objects.get()
    assert (run.ok, run.first_bad_seq) == (False, bad_seq)
    result = run_export_verify(api_client_for, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"BROKEN at seq {bad_seq}:" in result.stderr


def test_truncation_with_the_checkpoint_table_wiped_is_caught_by_the_anchor(chain30, tamper):
    tamper("DELETE FROM audit_chainevent WHERE seq > 25", "DELETE FROM audit_checkpoint")
    code, report = run_audit_verify()
    assert (code, report["first_bad_seq"]) == (1, 26)
    assert "truncated" in report["problem"]


def test_forged_checkpoint_signature_is_rejected(chain30, tamper):
    from audit.models import Checkpoint

    cp = Checkpoint.objects.get()
    lines = cp.note.split("\n")
    lines[1] = "31"
    Checkpoint.objects.filter(pk=cp.pk).update(note="\n".join(lines), size=31)
    code, report = run_audit_verify()
    assert code == 1 and "signature" in report["problem"]


def test_offline_verifier_imports_nothing_from_django(tmp_path):
    probe = (
        "import sys, audit.export.verify; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'psycopg', 'rest_framework')], "
        "sorted(m for m in sys.modules if m.startswith('django'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert settings.KILN_AUDIT_ORIGIN  # the settings the exports name


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("statements", "bad_seq"),
    [
        ([], None),
        ([("UPDATE audit_chainevent SET target = 'env:x' WHERE seq = 30", [])], 30),
        (
            [("DELETE FROM audit_chainevent WHERE seq = 21", [])],
            21,
        ),  # first row of the second range
        ([("UPDATE audit_chainevent SET prev_hash = hash WHERE seq = 21", [])], 21),
    ],
    ids=["intact", "edited-in-second-range", "deleted-at-boundary", "relinked-at-boundary"],
)
def test_parallel_verification_stitches_ranges(statements, bad_seq, committed_chain, tamper):
    from audit.chain.verification import verify_chain

    for i in range(40):
        record("alice", "portal.environment.approved", f"env:{i}")
    drain()
    if statements:
        tamper(*statements)
    report = verify_chain(workers=2)
    assert report.problem is None if bad_seq is None else report.problem.seq == bad_seq, (
        report.message
    )
    if bad_seq is None:
        assert report.checked == 40
