"""Witness cosignatures in Kiln: the intake (POST /audit/tlog/cosignature), their storage and audit,
the checkpoint and bundles served with them, a quorum offline, and audit_witness against the log."""

from __future__ import annotations

import base64
import json
import sqlite3

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.test import Client

from audit import record, triggers, witness
from audit.management.commands.audit_witness import Command as WitnessCommand
from audit.models import Checkpoint, Cosignature, OutboxEvent
from audit.services import cosignature_add, public_key_path
from audit.tree import tlog_verify
from audit.witness import selectors as witness_selectors
from kiln.errors import Forbidden
from kiln.identity.permissions import system_actor
from tests.audit.conftest import drain

pytestmark = pytest.mark.django_db

KEYS = {"w1": Ed25519PrivateKey.generate(), "w2": Ed25519PrivateKey.generate()}
URL = "/audit/tlog/cosignature"


@pytest.fixture
def witnesses(settings):
    settings.KILN_AUDIT_WITNESSES = ",".join(
        witness.witness_verifier_key(name, key.public_key()) for name, key in KEYS.items()
    )
    return KEYS


def _record(n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        record("alice", "portal.environment.approved", f"env:{i}", {"i": i})
    drain()


def cosigned(checkpoint: Checkpoint, name: str, key=None, timestamp: int = 1764547200) -> str:
    """The checkpoint's text with `name`'s cosignature line, as audit_witness posts it."""
    state = witness.WitnessState("", checkpoint.size, b"", checkpoint.note)
    return witness.cosigned_note(state, name, key or KEYS[name], timestamp)


def post(note: str | bytes):
    body = note if isinstance(note, bytes) else note.encode()
    return Client().post(URL, body, content_type="text/plain")


def _events() -> list[tuple[str, str, dict]]:
    return [
        (e.actor, e.action, e.data)
        for e in OutboxEvent.objects.filter(action="audit.checkpoint.cosigned")
    ]


def test_a_witness_cosignature_is_verified_stored_and_audited_once(witnesses):
    _record(5)
    cp = Checkpoint.objects.get(size=5)
    response = post(cosigned(cp, "w1"))
    assert response.status_code == 201, response.content
    assert response.json() == {"size": 5, "stored": ["w1"], "already": []}
    stored = Cosignature.objects.get()
    assert (stored.checkpoint_id, stored.witness, stored.timestamp) == (cp.id, "w1", 1764547200)
    assert stored.line.startswith("\u2014 w1 ") and stored.line.endswith("\n")
    assert _events() == [("system:witness-intake", "audit.checkpoint.cosigned",
                          {"witness": "w1", "size": 5, "timestamp": 1764547200})]  # fmt: skip
    again = post(cosigned(cp, "w1", timestamp=1764547999))
    assert again.status_code == 200 and again.json()["already"] == ["w1"]
    assert Cosignature.objects.get().timestamp == 1764547200 and len(_events()) == 1


@pytest.mark.parametrize(
    ("make", "status", "reason"),
    [
        (lambda cp: cosigned(cp, "w3", Ed25519PrivateKey.generate()), 403, "no cosignature by a witness this log knows (w1, w2)"),
        (lambda cp: cosigned(cp, "w1", KEYS["w2"]), 403, "not by its configured key"),
        (lambda cp: _flip_signature(cosigned(cp, "w1")), 403, "cosignature by 'w1' does not verify"),
        (lambda cp: cosigned(cp, "w1").replace("\n5\n", "\n4\n", 1), 404, "signed no checkpoint of size 4"),
        (lambda cp: cosigned(cp, "w1").replace("chain ", "chain A", 1), 404, "signed no checkpoint of size 5"),
        (lambda cp: "kiln\n5\nnot base64\n\n\u2014 w1 AAAA\n", 400, "checkpoint hash is not base64"),
        (lambda cp: "no signature block", 400, "not a signed checkpoint note"),
        (lambda cp: b"\xff\xfe", 400, "not UTF-8"),
        (lambda cp: "x" * 20000, 400, "longer than 16384 bytes"),
    ],
    ids=["unknown-witness", "wrong-key", "bad-signature", "other-size", "other-text", "bad-root",
         "no-signatures", "not-utf8", "too-long"],
)  # fmt: skip
def test_a_bad_cosignature_is_a_4xx_with_the_reason_and_changes_nothing(
    witnesses, make, status, reason
):
    _record(5)
    response = post(make(Checkpoint.objects.get(size=5)))
    assert response.status_code == status, response.content
    assert reason in response.json()["message"]
    assert not Cosignature.objects.exists() and _events() == []


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_cosignature SET line = 'forged'",
        "UPDATE audit_cosignature SET timestamp = timestamp + 1",
        "DELETE FROM audit_cosignature",
        "TRUNCATE audit_cosignature",
    ],
    ids=["update-line", "update-time", "delete", "truncate"],
)
def test_a_stored_cosignature_cannot_be_changed_or_removed_by_the_database(witnesses, sql):
    _record(5)
    assert post(cosigned(Checkpoint.objects.get(size=5), "w1")).status_code == 201
    before = list(Cosignature.objects.values_list("id", "witness", "timestamp", "line"))
    with pytest.raises(DatabaseError, match="cosignatures are append-only"), transaction.atomic():
        with connection.cursor() as cursor:
            # the insert's deferred foreign-key checks run first (TRUNCATE waits for none pending)
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(sql)
    assert list(Cosignature.objects.values_list("id", "witness", "timestamp", "line")) == before
    # another witness's cosignature is still stored beside it: the table only grows
    assert post(cosigned(Checkpoint.objects.get(size=5), "w2")).status_code == 201
    assert Cosignature.objects.count() == 2


def test_sqlite_cosignature_triggers_refuse_update_and_delete():
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE audit_cosignature (id integer primary key, witness text, line text)")
    for sql in triggers.cosignature_statements("sqlite", create=True):
        db.execute(sql)
    db.execute("INSERT INTO audit_cosignature (witness, line) VALUES ('w1', 'l')")
    for sql in ("UPDATE audit_cosignature SET line = 'm'", "DELETE FROM audit_cosignature"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(sql)
    db.execute("INSERT INTO audit_cosignature (witness, line) VALUES ('w2', 'l')")
    assert db.execute("SELECT count(*), min(line) FROM audit_cosignature").fetchone() == (2, "l")


def _flip_signature(note: str) -> str:
    body, [(name, blob)] = tlog_verify.split_note(note)
    blob = blob[:-1] + bytes([blob[-1] ^ 1])
    return f"{body}\n\u2014 {name} {base64.b64encode(blob).decode()}\n"


def test_without_configured_witnesses_nothing_is_accepted(settings):
    settings.KILN_AUDIT_WITNESSES = ""
    _record(3)
    response = post(cosigned(Checkpoint.objects.get(size=3), "w1"))
    assert response.status_code == 403 and "none configured" in response.json()["message"]


def test_only_the_witness_intake_stores_cosignatures(witnesses):
    _record(3)
    with pytest.raises(Forbidden):
        cosignature_add(
            note=cosigned(Checkpoint.objects.get(size=3), "w1"), actor=system_actor("audit-writer")
        )
    assert not Cosignature.objects.exists()


def test_the_log_serves_its_checkpoint_and_bundles_with_the_cosignatures_and_a_quorum_verifies(
    witnesses, api_client_for, settings
):
    _record(5)
    five = Checkpoint.objects.get(size=5)
    for name in ("w1", "w2"):
        assert post(cosigned(five, name)).status_code == 201
    _record(3, 5)  # a newer checkpoint (5 + the two cosignature events + 3), cosigned by w1 alone
    eight = Checkpoint.objects.order_by("-size").first()
    assert eight.size == 10 and post(cosigned(eight, "w1")).status_code == 201
    api = api_client_for("auditor")
    served = api.get("/audit/tlog/checkpoint").content.decode()
    assert served.startswith(eight.note) and served.count("\u2014 ") == 2
    keys = [witness.witness_verifier_key(n, k.public_key()) for n, k in KEYS.items()]
    vkey = public_key_path().read_text()
    assert tlog_verify.verify_checkpoint(served, vkey, keys, quorum=1).witnesses == ("w1",)
    # Entry 3 is in both trees; its bundle takes the one both witnesses cosigned.
    bundle = api.get("/api/v1/audit/events/3/proof").json()
    assert bundle["size"] == 5
    assert tlog_verify.verify_bundle(bundle, vkey, keys, quorum=2).witnesses == ("w1", "w2")
    newest = api.get("/api/v1/audit/events/7/proof").json()
    assert newest["size"] == 10
    with pytest.raises(
        tlog_verify.VerificationError, match="1 valid witness cosignatures .w1., the quorum is 2"
    ):
        tlog_verify.verify_bundle(newest, vkey, keys, quorum=2)
    listed = api.get(URL).json()
    assert listed["size"] == 10 and [c["witness"] for c in listed["cosignatures"]] == ["w1"]
    assert witness_selectors.witness_status()[1]["size"] == 5  # w2 last cosigned size 5


def test_the_cosignature_list_is_for_the_log_s_readers(witnesses, api_client_for, client):
    _record(2)
    assert api_client_for("engineer").get(URL).status_code == 403
    assert client.get(URL).status_code in (401, 403)
    assert api_client_for("auditor").get(URL).status_code == 200


class TestClientLog(witness.HttpLog):
    """HttpLog's paths over Django's test client instead of a socket (the same requests)."""

    __test__ = False

    def _call(self, path: str, body: bytes | None = None) -> bytes:
        client = Client()
        response = (
            client.get(path) if body is None else client.post(path, body, content_type="text/plain")
        )
        if response.status_code >= 300:
            raise witness.LogUnavailable(f"{path}: HTTP {response.status_code}")
        return response.content


def _witness_step(tmp_path, name: str = "w1") -> bool:
    command = WitnessCommand()
    opts = {"state": tmp_path / f"{name}.json", "name": name, "no_submit": False}
    return command.step(
        TestClientLog("http://log"), public_key_path().read_text(), KEYS[name], opts
    )


def test_audit_witness_follows_the_log_and_cosigns_each_consistent_checkpoint(
    witnesses, tmp_path, settings
):
    settings.KILN_AUDIT_TLOG_PUBLIC = True  # the witness holds no Kiln credentials
    _record(300)
    assert _witness_step(tmp_path)
    _record(500, 300)
    assert _witness_step(tmp_path)
    # 300, then its cosignature's audit event and 500 more
    assert sorted(Cosignature.objects.values_list("checkpoint__size", flat=True)) == [300, 801]
    state = json.loads((tmp_path / "w1.json").read_text())
    assert state["size"] == 801
    assert _witness_step(tmp_path)  # nothing new: posted again, stored once
    assert Cosignature.objects.count() == 2


def test_audit_witness_refuses_a_log_that_rolled_back_and_keeps_its_state(
    witnesses, tmp_path, settings, capsys
):
    settings.KILN_AUDIT_TLOG_PUBLIC = True
    _record(20)
    assert _witness_step(tmp_path)
    _record(10, 20)
    assert _witness_step(tmp_path)
    latest = Checkpoint.objects.get(size=31)  # the log now lies: it serves size 20 again
    with connection.cursor() as cursor:  # behind the cosignatures' triggers, as a tamperer would
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # ALTER TABLE waits for no pending check
        cursor.execute("ALTER TABLE audit_cosignature DISABLE TRIGGER USER")
        cursor.execute("DELETE FROM audit_cosignature WHERE checkpoint_id = %s", [latest.id])
        cursor.execute("ALTER TABLE audit_cosignature ENABLE TRIGGER USER")
    latest.delete()
    assert not _witness_step(tmp_path)
    assert (
        "REFUSED (rollback): refusing size 20: this witness cosigned size 31"
        in capsys.readouterr().err
    )
    assert json.loads((tmp_path / "w1.json").read_text())["size"] == 31
