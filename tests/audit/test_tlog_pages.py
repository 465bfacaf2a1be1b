"""The explorer's transparency-log card (tree head, last checkpoint, cosignatures, witnesses) and
"Prove this event" on an entry's page (verified on the page, with how to verify offline)."""

from __future__ import annotations

import json
import re

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit import record, witness
from audit.chain.writer import AuditWriter
from audit.models import Checkpoint
from audit.services import cosignature_add
from audit.tree import tlog_verify
from audit.witness import selectors as witness_selectors
from tests.audit.conftest import drain
from tests.audit.test_api_and_pages import _login

pytestmark = pytest.mark.django_db

KEY = Ed25519PrivateKey.generate()


@pytest.fixture
def log(settings):
    settings.KILN_AUDIT_WITNESSES = ",".join(
        witness.witness_verifier_key(name, KEY.public_key()) for name in ("alpha", "beta")
    )
    for i in range(7):
        record("alice", "portal.environment.approved", f"env:{i}", {"i": i})
    drain()
    cp = Checkpoint.objects.get(size=7)
    state = witness.WitnessState("", 7, b"", cp.note)
    cosignature_add(note=witness.cosigned_note(state, "alpha", KEY, 1764547200))
    drain()  # size 8 (the cosignature's own audit event), signed, not cosigned yet
    return cp


def test_the_explorer_shows_the_tree_head_its_checkpoint_and_the_witnesses(log, client):
    _login(client, "auditor")
    html = client.get("/audit/").content.decode()
    card = html.split('id="audit-tlog"')[1].split("</section>")[0]
    assert "8 entries" in card and witness_selectors.tree_head()["root"] in card
    assert re.search(r"size 8, signed .* UTC", card) and "covers the tree" in card
    assert "none on this checkpoint yet" in card  # size 8 has no cosignature
    rows = card.split("<tbody>")[1]
    alpha, beta = rows.split("<tr>")[1:3]
    assert "<td>alpha</td>" in alpha and "<td>7 <span" in alpha and "1 behind" in alpha
    assert "<td>beta</td>" in beta and "never" in beta
    assert witness.witness_verifier_key("alpha", KEY.public_key()) in card


def test_the_status_refresh_brings_the_tlog_card_so_both_count_the_same_entries(
    log, client, monkeypatch
):
    _login(client, "auditor")
    for i in range(3):  # after the page loaded: three entries no checkpoint signs yet
        record("alice", "portal.environment.approved", f"env:late-{i}", {"i": i})
    monkeypatch.setattr(AuditWriter, "_checkpoint", lambda writer: None)
    drain()
    html = client.get("/audit/status/").content.decode()
    status = html.split('id="audit-status"')[1].split("</section>")[0]
    card = html.split('id="audit-tlog"')[1].split("</section>")[0]
    assert card.startswith(' hx-swap-oob="true"')  # htmx swaps it in beside the status panel
    assert "3 newer entries uncovered" in status and "3 newer entries not signed yet" in card
    assert "11 entries" in card and "size 8" in status and "size 8" in card
    shown = re.search(r'name="tlog" value="([^"]+)"', card)[1]
    unchanged = client.get("/audit/status/", {"tlog": shown}).content.decode()
    assert 'id="audit-status"' in unchanged and 'id="audit-tlog"' not in unchanged


def test_the_explorer_says_when_no_witness_is_configured(client, settings):
    settings.KILN_AUDIT_WITNESSES = ""
    _login(client, "auditor")
    assert "No witness is configured" in client.get("/audit/").content.decode()


def test_an_event_offers_a_proof_and_proves_it_on_the_page(log, client):
    _login(client, "auditor")
    page = client.get("/audit/events/3/").content.decode()
    assert 'id="prove"' in page and 'href="?prove=1#proof"' in page
    proved = client.get("/audit/events/3/", {"prove": "1"}).content.decode()
    verdict = proved.split('id="proof-verdict"')[1].split("</dd>")[0]
    assert "verified" in verdict and "not verified" not in verdict
    assert "alpha" in proved.split('id="proof-cosigners"')[1].split("</dd>")[0]
    bundle = json.loads(
        proved.split('id="proof-bundle" type="application/json">')[1].split("</script>")[0]
    )
    assert bundle["index"] == 2 and bundle["size"] == 7  # the checkpoint a witness cosigned
    assert "tlog_verify.py --public-key kiln-audit.pub bundle kiln-audit-proof-3.json" in proved
    assert "/api/v1/audit/events/3/proof" in proved and "audit/prove.js" in proved


def test_a_proof_that_does_not_verify_says_why(log, client, tamper):
    # A chain row rewritten behind the triggers: its entry no longer leads to the signed root.
    tamper(("UPDATE audit_chainevent SET target = 'env:x' WHERE seq = 3", []))
    _login(client, "auditor")
    proved = client.get("/audit/events/3/", {"prove": "1"}).content.decode()
    verdict = proved.split('id="proof-verdict"')[1].split("</dd>")[0]
    assert "not verified" in verdict and "entry at index 2 is not the one the checkpoint" in verdict


def test_an_event_no_checkpoint_covers_yet_says_so(client):
    record("alice", "portal.environment.approved", "env:0")
    drain()
    record("alice", "portal.environment.approved", "env:1")
    drain()
    Checkpoint.objects.filter(size=2).delete()  # as if the writer had not signed seq 2 yet
    _login(client, "auditor")
    proved = client.get("/audit/events/2/", {"prove": "1"}).content.decode()
    assert "no signed checkpoint covers seq 2 yet" in proved


def test_the_verifier_downloads_as_the_one_file_and_only_for_auditors(client):
    _login(client, "engineer")
    assert client.get("/audit/tlog_verify.py").status_code == 403
    client.logout()
    _login(client, "auditor", "engineer")
    response = client.get("/audit/tlog_verify.py")
    assert (
        response.status_code == 200
        and 'filename="tlog_verify.py"' in response["Content-Disposition"]
    )
    assert response.content.decode() == open(tlog_verify.__file__, encoding="utf-8").read()
