"""Auditor API (events, export) and pages (explorer, detail, status); readiness reports writer lag."""

from __future__ import annotations

import csv
import io
import json
import warnings
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, User
from django.test import AsyncClient
from django.utils import timezone

from audit import record
from audit.models import ChainEvent, OutboxEvent
from kiln.streaming import CHUNK_BYTES
from tests.audit.conftest import drain

pytestmark = pytest.mark.django_db


@pytest.fixture
def events():
    for i in range(12):
        record(
            f"user{i % 3}",
            "portal.environment.approved" if i % 2 else "portal.environment.requested",
            f"env:{i}",
            {"i": i},
        )
    drain()
    return list(ChainEvent.objects.order_by("seq"))


@pytest.mark.parametrize("path", ["/api/v1/audit/events/", "/api/v1/audit/export"])
def test_api_is_for_auditors_only(path, events, client, api_client_for):
    assert client.get(path).status_code in (401, 403)
    assert api_client_for("engineer").get(path).status_code == 403
    assert api_client_for("approver").get(path).status_code == 403
    assert not OutboxEvent.objects.filter(action="audit.export.created").exists()


def test_event_list_filters_and_cursor_pagination(events, api_client_for):
    api = api_client_for("auditor", sub="ivy")
    page1 = api.get("/api/v1/audit/events/", {"limit": 5}).json()
    assert [e["seq"] for e in page1["results"]] == [12, 11, 10, 9, 8]
    page2 = api.get("/api/v1/audit/events/", {"limit": 5, "cursor": page1["next_cursor"]}).json()
    assert [e["seq"] for e in page2["results"]] == [7, 6, 5, 4, 3]
    page3 = api.get("/api/v1/audit/events/", {"limit": 5, "cursor": page2["next_cursor"]}).json()
    assert [e["seq"] for e in page3["results"]] == [2, 1] and page3["next_cursor"] is None
    first = page3["results"][-1]
    assert first["prev_hash"] == "0" * 64 and first["data"] == {"i": 0}
    assert first["recorded_at"].endswith("Z")

    by_actor = api.get("/api/v1/audit/events/", {"actor": "user1"}).json()["results"]
    assert {e["actor"] for e in by_actor} == {"user1"} and len(by_actor) == 4
    by_action = api.get("/api/v1/audit/events/", {"action": "portal.environment.approved"}).json()[
        "results"
    ]
    assert len(by_action) == 6
    by_prefix = api.get("/api/v1/audit/events/", {"action": "portal."}).json()["results"]
    assert len(by_prefix) == 12
    by_target = api.get("/api/v1/audit/events/", {"target": "env:3"}).json()["results"]
    assert [e["seq"] for e in by_target] == [4]
    future = (timezone.now() + timedelta(days=1)).isoformat()
    assert api.get("/api/v1/audit/events/", {"from": future}).json()["results"] == []
    assert len(api.get("/api/v1/audit/events/", {"to": future}).json()["results"]) == 12


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-02-02", "to": "2026-02-01"}, "before"),
        ({"cursor": "forged!"}, "cursor"),
        ({"limit": "0"}, "limit"),
    ],
    ids=["bad-date", "inverted-range", "bad-cursor", "bad-limit"],
)
def test_bad_query_is_a_400_with_a_reason(params, reason, events, api_client_for):
    response = api_client_for("auditor").get("/api/v1/audit/events/", params)
    assert response.status_code == 400
    assert reason in response.json()["message"]


def test_export_streams_jsonl_with_covering_checkpoints_and_is_audited(events, api_client_for):
    response = api_client_for("auditor", sub="ivy").get(
        "/api/v1/audit/export",
        {"from": "2000-01-01", "to": (timezone.now() + timedelta(hours=1)).isoformat()},
    )
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    lines = [
        json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()
    ]
    header, body = lines[0], lines[1:]
    assert header["type"] == "header" and (header["first_seq"], header["last_seq"]) == (1, 12)
    assert [e["seq"] for e in body if e["type"] == "event"] == list(range(1, 13))
    checkpoints = [c for c in body if c["type"] == "checkpoint"]
    assert [c["size"] for c in checkpoints] == [12] and checkpoints[0]["note"].startswith(
        "kiln.local/audit\n12\n"
    )
    exported = OutboxEvent.objects.get(action="audit.export.created")
    assert (
        exported.actor == "ivy"
        and exported.data["first_seq"] == 1
        and exported.data["format"] == "jsonl"
    )


def test_an_export_taken_before_the_newest_entries_are_signed_ends_at_the_last_checkpoint(
    events, api_client_for, monkeypatch, tmp_path
):
    """Entries chained but not yet covered by a checkpoint (the writer signs once idle) are left
    out and counted, so an export verifies offline whenever it is taken."""
    from audit.chain.writer import AuditWriter
    from audit.export.verify import verify_export
    from audit.services import public_key_path

    for i in range(3):
        record("user9", "portal.environment.requested", f"env:late-{i}", {"i": i})
    monkeypatch.setattr(AuditWriter, "_checkpoint", lambda self: None)  # not idle yet
    drain()
    assert ChainEvent.objects.count() == 15
    response = api_client_for("auditor").get("/api/v1/audit/export")
    body = b"".join(response.streaming_content).decode()
    header = json.loads(body.splitlines()[0])
    assert (header["last_seq"], header["unsigned_after_last"]) == (12, 3)
    path = tmp_path / "export.jsonl"
    path.write_text(body)
    assert verify_export(path, public_key_path().read_text()).ok


def test_export_as_csv(events, api_client_for):
    response = api_client_for("auditor").get("/api/v1/audit/export", {"format": "csv"})
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["type"] for r in rows].count("event") == 12 and rows[-1]["type"] == "checkpoint"
    assert rows[0]["hash"] == ChainEvent.objects.get(seq=1).hash


def test_export_with_a_bad_format_is_refused_and_records_nothing(events, api_client_for):
    response = api_client_for("auditor").get("/api/v1/audit/export", {"format": "xml"})
    assert response.status_code == 400 and "format" in response.json()["message"]
    assert not OutboxEvent.objects.filter(action="audit.export.created").exists()


def _login(client, *roles: str) -> User:
    user = User.objects.create_user(f"u-{'-'.join(roles) or 'none'}", password="pw-123456789")
    for role in roles:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    client.force_login(user)
    return user


def test_explorer_shows_entries_filters_status_and_export_buttons(events, client):
    _login(client, "auditor")
    page = client.get("/audit/", {"actor": "user2"})
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count("/audit/events/") >= 4  # four user2 entries (and the head link)
    assert "Chain status" in html and "covers head" in html
    assert 'id="export-jsonl"' in html and "/api/v1/audit/export" in html and "format=csv" in html


def test_explorer_paginates(client):
    for i in range(60):
        record("bulk", "portal.environment.approved", f"env:{i}")
    drain()
    _login(client, "auditor")
    html = client.get("/audit/").content.decode()
    assert 'rel="next"' in html
    next_url = (
        html.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0].replace("&amp;", "&")
    )
    older = client.get(next_url).content.decode()
    assert ">10</a>" in older and ">60</a>" not in older


def test_event_detail_shows_hash_and_neighbours(events, client):
    _login(client, "auditor")
    html = client.get("/audit/events/5/").content.decode()
    e4, e5, e6 = (ChainEvent.objects.get(seq=s) for s in (4, 5, 6))
    assert e5.hash in html and e5.prev_hash in html
    assert "/audit/events/4/" in html and "/audit/events/6/" in html
    assert "prev_hash matches seq 4" in html
    assert client.get("/audit/events/999/").status_code == 404


def test_pages_are_for_auditors_only(events, client):
    assert client.get("/audit/").status_code == 302  # to the login page
    _login(client, "engineer")
    assert client.get("/audit/").status_code == 403
    assert client.get("/audit/events/1/").status_code == 403


def test_readyz_reports_writer_lag(client, settings):
    response = client.get("/readyz")
    assert response.json()["checks"]["audit_writer"]["pending"] == 0
    record("alice", "portal.environment.approved", "env:1")
    OutboxEvent.objects.update(recorded_at=datetime(2020, 1, 1, tzinfo=UTC))
    response = client.get("/readyz")
    check = response.json()["checks"]["audit_writer"]
    assert response.status_code == 503
    assert check["ok"] is False and check["pending"] == 1 and check["lag_seconds"] > 3600
    drain()
    assert client.get("/readyz").json()["checks"]["audit_writer"]["ok"] is True


def test_csv_export_verifies_offline(events, api_client_for, tmp_path):
    from audit.export.verify import verify_export
    from audit.services import public_key_path

    response = api_client_for("auditor").get("/api/v1/audit/export", {"format": "csv"})
    path = tmp_path / "export.csv"
    path.write_bytes(b"".join(response.streaming_content))
    report = verify_export(path, public_key_path().read_text())
    assert report.ok and report.checked == 12, report.message
    text = path.read_text().replace("user1", "userX", 1)
    path.write_text(text)
    report = verify_export(path, public_key_path().read_text())
    assert not report.ok and report.problem.seq == 2


def test_a_csv_cell_a_spreadsheet_would_run_is_quoted_and_still_verifies(
    events, api_client_for, tmp_path
):
    from audit.export.verify import csv_text, verify_export
    from audit.services import public_key_path

    for actor in ('=HYPERLINK("http://evil.example","x")', "'quoted", "@sum", "-1+1"):
        record(actor, "chaos.lever.released", "chaos.lever:platform", {"reason": "=1+1"})
    drain()
    response = api_client_for("auditor").get("/api/v1/audit/export", {"format": "csv"})
    path = tmp_path / "export.csv"
    path.write_bytes(b"".join(response.streaming_content))
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    actors = [row["actor"] for row in rows if row["type"] == "event"][-4:]
    assert actors == ['\'=HYPERLINK("http://evil.example","x")', "''quoted", "'@sum", "'-1+1"]
    assert all(
        not cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row.values() if cell
    )
    report = verify_export(path, public_key_path().read_text())
    assert report.ok and report.checked == 16, report.message
    # A cell quoted before the quoting began ('bob) reads as it is; a stray trailing comma on
    # a line is an extra, unnamed column the verifier passes over.
    assert csv_text("'bob") == "'bob" and csv_text("''quoted") == "'quoted"
    assert csv_text(None) is None and csv_text(["x"]) == ["x"]
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1].rstrip("\r\n") + ",\r\n"
    path.write_text("".join(lines))
    assert verify_export(path, public_key_path().read_text()).ok


def test_export_streams_in_chunks_under_asgi(events, make_token):
    for i in range(600):  # about 200 kB of lines: several chunks
        record("bulk", "portal.environment.approved", f"env:{i}")
    drain()
    client = AsyncClient()
    token = make_token(sub="ivy", roles=["auditor"])

    async def fetch():
        response = await client.get(
            "/api/v1/audit/export", headers={"authorization": f"Bearer {token}"}
        )
        chunks = [chunk async for chunk in response]  # as Django's ASGI handler reads it
        return response, chunks

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "must consume synchronous iterators" fails the test
        response, chunks = async_to_sync(fetch)()
    assert response.status_code == 200
    assert len(chunks) >= 2  # chunks of many lines, neither one line per chunk nor all at once
    assert all(len(c) >= CHUNK_BYTES for c in chunks[:-1])
    lines = b"".join(chunks).decode().splitlines()
    events_out = [json.loads(line) for line in lines if '"type":"event"' in line]
    assert [e["seq"] for e in events_out] == list(range(1, ChainEvent.objects.count() + 1))
