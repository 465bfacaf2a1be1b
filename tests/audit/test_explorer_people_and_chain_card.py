"""The explorer's Who filter (people, system components, both) and its ticks grouped under their
rollout; the auditor's home card of the chain's state with Verify now; what needs an auditor."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone

from audit import record
from audit.home.chain_state import VERIFY_EVERY, chain_concerns
from audit.models import ChainEvent, Checkpoint, OutboxEvent, VerificationRun
from kiln.attention import collect
from kiln.identity.permissions import actor_for_user
from tests.audit.conftest import drain

pytestmark = pytest.mark.django_db


def _login(client, role: str, username: str | None = None) -> User:
    user = User.objects.create_user(username or f"{role}-user", password="x")
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    client.force_login(user)
    return user


@pytest.fixture
def mixed():
    """Two people's entries, a node sync, and four ticks of one rollout between them."""
    record("alice", "portal.environment.requested", "portal:environment:e1", {})
    record("system:scheduler-node-sync", "scheduler.nodes.synced", "scheduler:nodes:cluster", {})
    for tick in range(1, 5):
        record("system:canary-ticker", "canary.tick.decided", "canary:rollout:r1", {"tick": tick})
    record("bob", "canary.rollout.aborted", "canary:rollout:r1", {})
    drain()


@pytest.mark.parametrize(
    ("who", "actors"),
    [
        ("people", {"alice", "bob"}),
        ("system", {"system:scheduler-node-sync", "system:canary-ticker"}),
        ("all", {"alice", "bob", "system:scheduler-node-sync", "system:canary-ticker"}),
        ("", {"alice", "bob", "system:scheduler-node-sync", "system:canary-ticker"}),
    ],
    ids=["people", "system", "all", "unset"],
)
def test_the_api_filters_people_system_or_both(mixed, api_client_for, who, actors):
    api = api_client_for("auditor", sub="ivy")
    page = api.get("/api/v1/audit/events/", {"who": who} if who else {})
    assert page.status_code == 200
    assert {e["actor"] for e in page.json()["results"]} == actors


def test_a_bad_who_is_a_400_naming_the_field_in_the_api_and_the_page(mixed, api_client_for, client):
    answer = api_client_for("auditor", sub="ivy").get("/api/v1/audit/events/", {"who": "robots"})
    assert answer.status_code == 400
    assert answer.json()["extra"]["fields"]["who"] == ["must be one of: people, system, all"]
    _login(client, "auditor")
    page = client.get("/audit/", {"who": "robots"})
    assert page.status_code == 400 and "Who must be people, system or all." in page.content.decode()


def test_a_bad_filter_keeps_what_was_typed_and_lists_nothing_rather_than_everything(mixed, client):
    _login(client, "auditor")
    page = client.get("/audit/", {"from": "2026-12-07T10:00", "to": "2026-12-07T09:00",
                                  "actor": "alice"})  # fmt: skip
    html = page.content.decode()
    assert page.status_code == 400
    assert "From must be before To. Nothing is listed until the filter is corrected." in html
    assert 'name="actor" value="alice"' in html and 'value="2026-12-07T10:00"' in html
    assert "<table" not in html and "No audit entries match" not in html
    long = client.get("/audit/", {"target": "t" * 301}).content.decode()
    assert "Target is longer than 300 characters. Nothing is listed" in long
    assert "<table" not in long
    # The same filter within bounds lists what it matches.
    assert "<table" in client.get("/audit/", {"actor": "alice"}).content.decode()


def test_the_explorer_shows_people_only_and_folds_ticks_under_their_rollout(mixed, client):
    _login(client, "auditor")
    both = client.get("/audit/").content.decode()
    # The four ticks are one row, named by their rollout, with each tick inside it.
    group = re.search(
        r'<tr class="tick-group" data-target="canary:rollout:r1">(.*?)</tr>', both, re.S
    )
    assert group is not None and "4 analysis ticks" in group[1]
    assert group[1].count("<li>") == 4
    assert both.count("canary.tick.decided") == 4  # inside the group only, once per tick
    people = client.get("/audit/", {"who": "people"}).content.decode()
    assert 'value="people" selected' in people
    assert "alice" in people and "bob" in people
    assert "system:scheduler-node-sync" not in people and "tick-group" not in people
    system = client.get("/audit/", {"who": "system"}).content.decode()
    assert "system:scheduler-node-sync" in system and ">alice<" not in system


def test_the_auditors_home_shows_the_chain_card_with_verify_now(mixed, client):
    Checkpoint_count = Checkpoint.objects.count()
    _login(client, "auditor")
    html = client.get("/").content.decode()
    card = re.search(
        r'<section class="card dash-audit" id="audit-chain-card">(.*?)</section>', html, re.S
    )
    assert card is not None
    size = ChainEvent.objects.count()
    assert f"{size} entries" in card[1]
    assert "Last checkpoint" in card[1] and "Last cosignature" in card[1]
    assert "Last verification" in card[1] and "never" in card[1]
    assert 'action="/audit/verify/"' in card[1] and "Verify now" in card[1]
    assert Checkpoint.objects.count() == Checkpoint_count  # reading the card changes nothing


def test_verify_now_from_home_is_audited_and_refused_to_an_engineer(mixed, client):
    _login(client, "engineer", "erin")
    assert 'id="audit-chain-card"' not in client.get("/").content.decode()
    assert client.post("/audit/verify/").status_code == 403
    assert not OutboxEvent.objects.filter(action="audit.verification.requested").exists()
    client.logout()
    _login(client, "auditor", "ivy")
    answer = client.post("/audit/verify/")
    assert answer.status_code == 302
    asked = OutboxEvent.objects.get(action="audit.verification.requested")
    assert asked.actor == "ivy"


def _auditor() -> object:
    user = User.objects.create_user("ivy-auditor", password="x")
    user.groups.add(Group.objects.get_or_create(name="auditor")[0])
    return actor_for_user(user)


def test_a_failed_verification_needs_the_auditor_and_no_one_else(mixed):
    now = timezone.now()
    VerificationRun.objects.create(
        started_at=now, finished_at=now, ok=False, checked=3, first_bad_seq=4,
        message="hash mismatch at seq 4",
    )  # fmt: skip
    items = [i for i in collect(_auditor()) if i.kind == "audit"]
    assert [i.title for i in items] == ["The audit chain failed verification at seq 4"]
    assert items[0].url == "/audit/" and "hash mismatch" in items[0].detail
    engineer = User.objects.create_user("erin", password="x")
    engineer.groups.add(Group.objects.get_or_create(name="engineer")[0])
    assert [i for i in collect(actor_for_user(engineer)) if i.kind == "audit"] == []


def test_a_chain_verified_recently_needs_nothing_while_checkpoints_are_on_time(mixed, settings):
    settings.KILN_AUDIT_CHECKPOINT_SECONDS = 3600  # nothing unsigned is late within the hour
    now = timezone.now()
    size = ChainEvent.objects.count()
    VerificationRun.objects.create(started_at=now, finished_at=now, ok=True, checked=size)
    assert chain_concerns(now=now) == []


def test_an_old_verification_and_long_unsigned_entries_need_the_auditor(mixed, settings):
    settings.KILN_AUDIT_CHECKPOINT_SECONDS = 1
    size = ChainEvent.objects.count()  # seven entries
    then = timezone.now() - VERIFY_EVERY - timedelta(minutes=5)
    verified = VerificationRun(started_at=then, finished_at=then, ok=True, checked=2)
    # The last checkpoint signed the first two entries, as the third was recorded; ten minutes
    # later (three periods of one second are long past) the five after them are still unsigned.
    oldest = ChainEvent.objects.get(seq=3).recorded_at
    signed = Checkpoint(size=2, signed_at=oldest)
    later = oldest + timedelta(minutes=10)
    concerns = chain_concerns(now=later, size=size, checkpoint=signed, verification=verified)
    by_kind = {c.key.split(":")[0]: c for c in concerns}
    assert by_kind["audit.verification.due"].title == "Verify the audit chain"
    assert by_kind["audit.verification.due"].detail.endswith(f"; {size} entries")
    stale = by_kind["audit.checkpoint.stale"]
    assert stale.title == "No checkpoint signs the newest audit entries"
    assert stale.detail.startswith(f"{size - 2} entries unsigned since ")
    # Within the three periods, nothing is late; just past them, the unsigned entries are.
    within = chain_concerns(now=oldest + timedelta(seconds=2), size=size, checkpoint=signed,
                            verification=verified)  # fmt: skip
    assert [c.key.split(":")[0] for c in within] == ["audit.verification.due"]
    past = chain_concerns(now=oldest + timedelta(seconds=3.1), size=size, checkpoint=signed,
                          verification=verified)  # fmt: skip
    assert "audit.checkpoint.stale" in {c.key.split(":")[0] for c in past}


def test_a_witness_that_stopped_cosigning_needs_the_auditor(mixed, settings):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from audit import witness

    settings.KILN_AUDIT_WITNESSES = witness.witness_verifier_key(
        "w1", Ed25519PrivateKey.generate().public_key()
    )
    settings.KILN_AUDIT_CHECKPOINT_SECONDS = 1
    size = ChainEvent.objects.count()
    now = timezone.now()
    verified = VerificationRun(started_at=now, finished_at=now, ok=True, checked=size)
    # A checkpoint of the whole chain signed ten minutes ago that w1 never cosigned.
    signed = Checkpoint(size=size, signed_at=now - timedelta(minutes=10))
    concerns = chain_concerns(now=now, size=size, checkpoint=signed, verification=verified)
    assert [c.key for c in concerns] == [f"audit.witness.behind:w1:{size}"]
    assert concerns[0].title == "Witness w1 is not cosigning"
    assert concerns[0].detail.startswith("last cosigned size never; the latest checkpoint")
    # Signed a moment ago: the witness has time yet.
    fresh = Checkpoint(size=size, signed_at=now)
    assert chain_concerns(now=now, size=size, checkpoint=fresh, verification=verified) == []
