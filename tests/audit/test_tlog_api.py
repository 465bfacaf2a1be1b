"""The transparency log over HTTP: tiles, checkpoint, entry bundles, proofs and proof bundles."""

from __future__ import annotations

import base64
import json

import pytest

from audit import chain, record
from audit.chain import notes
from audit.models import ChainEvent, MerkleTile, OutboxEvent
from audit.tree import merkle
from tests.audit.conftest import drain

pytestmark = pytest.mark.django_db

TLOG_PATHS = [
    "/audit/tlog/checkpoint",
    "/audit/tlog/tile/0/000.p/5",
    "/audit/tlog/tile/entries/000.p/5",
    "/api/v1/audit/proofs/inclusion?seq=1",
    "/api/v1/audit/proofs/consistency?from=1",
    "/api/v1/audit/events/1/proof",
]


@pytest.fixture
def log():
    for i in range(5):
        record("alice", "portal.environment.approved", f"env:{i}", {"i": i})
    drain()
    return list(ChainEvent.objects.order_by("seq"))


def _b64(text: str) -> bytes:
    return base64.b64decode(text)


def _leaves(rows) -> list[bytes]:
    return [
        merkle.leaf_hash(chain.entry_bytes(r.seq, str(r.event_id), chain.format_time(r.recorded_at),
                                           r.actor, r.action, r.target, r.data, r.trace_id))
        for r in rows
    ]  # fmt: skip


@pytest.mark.parametrize("path", TLOG_PATHS)
def test_the_log_is_for_auditors_unless_it_is_public(path, log, client, api_client_for, settings):
    assert client.get(path).status_code in (401, 403)
    assert api_client_for("engineer").get(path).status_code == 403
    assert api_client_for("auditor").get(path).status_code == 200
    settings.KILN_AUDIT_TLOG_PUBLIC = True
    assert client.get(path).status_code == 200


def test_a_public_logs_tiles_are_cached_by_anyone_and_an_auditors_by_nobody(log, client, api_client_for, settings):
    settings.KILN_AUDIT_TLOG_PUBLIC = True
    anonymous = client.get("/audit/tlog/tile/0/000.p/5")
    assert anonymous.status_code == 200
    assert anonymous["Cache-Control"] == "public, max-age=31536000, immutable"
    signed = api_client_for("auditor").get("/audit/tlog/tile/0/000.p/5")
    assert signed.status_code == 200 and signed["Cache-Control"] == "private, no-store"


def test_a_client_computes_a_proof_from_the_tiles_and_the_checkpoint(log, api_client_for, settings):
    from audit.services import signing_key

    api = api_client_for("auditor")
    note = api.get("/audit/tlog/checkpoint").content.decode()
    cp = notes.verify(note, settings.KILN_AUDIT_ORIGIN, signing_key().public_key())
    assert cp.size == 5
    tile = api.get("/audit/tlog/tile/0/000.p/5")
    # Tiles never change, but this log is for auditors: an answer to a bearer token is not
    # for shared caches (the public log's anonymous tiles are: test_tlog_pages, fast reads).
    assert tile["Cache-Control"] == "private, no-store"
    assert tile["Content-Type"] == "application/octet-stream"
    hashes = tile.content
    assert len(hashes) == 5 * 32 and hashes == b"".join(_leaves(log))
    source = merkle.tile_source(lambda level, index: hashes if (level, index) == (0, 0) else b"")
    assert merkle.root(source, 5).hex() == cp.root_hash
    bundle = api.get("/audit/tlog/tile/entries/000.p/5").content
    entries, at = [], 0
    while at < len(bundle):
        n = int.from_bytes(bundle[at : at + 2], "big")
        entries.append(bundle[at + 2 : at + 2 + n])
        at += 2 + n
    assert [merkle.leaf_hash(e) for e in entries] == _leaves(log)
    assert json.loads(entries[2])["target"] == "env:2"


def test_inclusion_and_consistency_proofs_verify(log, api_client_for):
    api = api_client_for("auditor")
    leaves = _leaves(log)
    out = api.get("/api/v1/audit/proofs/inclusion", {"seq": 3, "size": 4}).json()
    assert (out["seq"], out["index"], out["size"], out["checkpoint"]) == (3, 2, 4, None)
    assert _b64(out["leaf_hash"]) == leaves[2]
    merkle.verify_inclusion(2, 4, leaves[2], [_b64(p) for p in out["proof"]], _b64(out["root"]))
    whole = api.get("/api/v1/audit/proofs/inclusion", {"seq": 5}).json()
    assert whole["size"] == 5 and whole["checkpoint"].startswith("kiln")
    out = api.get("/api/v1/audit/proofs/consistency", {"from": 2, "to": 5}).json()
    merkle.verify_consistency(
        2, 5, _b64(out["old_root"]), _b64(out["new_root"]), [_b64(p) for p in out["proof"]]
    )
    assert _b64(out["new_root"]) == _b64(whole["root"])


def test_the_proof_bundle_of_an_event_verifies_offline(log, api_client_for, settings):
    from audit.services import signing_key

    response = api_client_for("auditor").get("/api/v1/audit/events/4/proof")
    assert "kiln-audit-proof-4.json" in response["Content-Disposition"]
    bundle = response.json()
    cp = notes.verify(bundle["checkpoint"], settings.KILN_AUDIT_ORIGIN, signing_key().public_key())
    leaf = merkle.leaf_hash(bundle["entry"].encode())
    merkle.verify_inclusion(
        bundle["index"],
        cp.size,
        leaf,
        [_b64(p) for p in bundle["proof"]],
        bytes.fromhex(cp.root_hash),
    )
    assert json.loads(bundle["entry"])["seq"] == 4


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        ("/api/v1/audit/proofs/inclusion?seq=6", 400, "seq 6 is not in a tree of size 5"),
        ("/api/v1/audit/proofs/inclusion?seq=2&size=9", 400, "size 9 is not between 1"),
        ("/api/v1/audit/proofs/inclusion?seq=0", 400, "seq"),
        ("/api/v1/audit/proofs/inclusion?seq=x", 400, "seq"),
        ("/api/v1/audit/proofs/inclusion", 400, "`seq` is required"),
        ("/api/v1/audit/proofs/consistency?from=4&to=2", 400, "from=4 is not between 1 and to=2"),
        ("/api/v1/audit/proofs/consistency?from=1&to=99", 400, "to=99"),
        ("/api/v1/audit/events/9/proof", 404, "no signed checkpoint covers seq 9"),
        ("/audit/tlog/tile/0/000", 404, "does not hold 256 hashes"),
        ("/audit/tlog/tile/0/000.p/9", 404, "does not hold 9 hashes"),
        ("/audit/tlog/tile/0/0000", 400, "not a tile index"),
        ("/audit/tlog/tile/0/000.p/0", 400, "partial tile width"),
        ("/audit/tlog/tile/0/x000/000", 400, "not the canonical path"),
        ("/audit/tlog/tile/64/000", 400, "tile level 64"),
        ("/audit/tlog/tile/entries/000.p/6", 404, "does not hold 6 entries"),
        ("/audit/tlog/tile/entries/abc", 400, "not a tile index"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith("/") else None,
)
def test_bad_proof_and_tile_requests_get_a_4xx_with_the_reason(
    log, api_client_for, path, status, reason
):
    api = api_client_for("auditor")
    assert api.get("/api/v1/audit/proofs/inclusion?seq=1").status_code == 200  # caller known now
    tiles = {(t.level, t.index): bytes(t.hashes) for t in MerkleTile.objects.all()}
    recorded = OutboxEvent.objects.count()
    response = api.get(path)
    assert response.status_code == status, response.content
    assert reason in response.json()["message"]
    assert {(t.level, t.index): bytes(t.hashes) for t in MerkleTile.objects.all()} == tiles
    assert OutboxEvent.objects.count() == recorded
