"""Chaos events written as `canary.*` before chaos became its own app and as `chaos.*` since:
the chain keeps both, the verifier and the offline verifier accept both, the explorer finds both."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from audit import record
from audit.chain import renamed
from audit.chain.verification import verify_chain
from audit.export.verify import verify_export
from audit.models import ChainEvent
from audit.selectors import EventFilter, event_list
from audit.services import public_key_path
from tests.audit.conftest import drain

pytestmark = pytest.mark.django_db

EXP = "0f8e2a8c-1111-4222-8333-944445555666"
OLD = [
    ("canary.experiment.created", f"canary.chaosexperiment:{EXP}"),
    ("canary.lease.acquired", f"canary.chaosexperiment:{EXP}"),
    ("canary.fault.injected", f"canary.chaosexperiment:{EXP}"),
]
NEW = [
    ("chaos.fault.reverted", f"chaos.chaosexperiment:{EXP}"),
    ("chaos.lease.released", f"chaos.chaosexperiment:{EXP}"),
    ("chaos.fault.injected", f"chaos.chaosexperiment:{EXP}"),
]
ROLLOUT = ("canary.rollout.promoted", "canary.rollout:r1")


@pytest.fixture
def chain():
    """Old chaos names, a rollout event, then new chaos names, all chained."""
    for action, target in [*OLD, ROLLOUT, *NEW]:
        record("system:chaos-controller", action, target, {"action": action})
    drain()
    return list(ChainEvent.objects.order_by("seq"))


def _actions(**filters: str) -> list[str]:
    return sorted(event_list(EventFilter(**filters)).values_list("action", flat=True))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("chaos.fault.injected", ["chaos.fault.injected", "canary.fault.injected"]),
        ("canary.fault.injected", ["canary.fault.injected", "chaos.fault.injected"]),
        ("canary.rollout.promoted", ["canary.rollout.promoted"]),
        ("portal.environment.approved", ["portal.environment.approved"]),
    ],
    ids=["new-finds-old", "old-finds-new", "canary-unrenamed", "other-app"],
)
def test_action_names_pair_the_old_and_new_chaos_names(name, expected):
    assert renamed.action_names(name) == expected


def test_action_prefixes_cover_the_old_names_of_a_renamed_subsystem():
    assert sorted(renamed.action_prefixes("chaos.")) == [
        "canary.experiment.",
        "canary.fault.",
        "canary.lease.",
        "chaos.",
    ]
    assert renamed.action_prefixes("chaos.lease.") == ["chaos.lease.", "canary.lease."]
    # "canary." already covers the old chaos names; new chaos events are not canary's.
    assert renamed.action_prefixes("canary.") == ["canary."]
    assert renamed.action_prefixes("portal.") == ["portal."]


def test_the_chain_keeps_the_names_events_were_written_with_and_verifies(chain):
    assert [e.action for e in chain] == [a for a, _t in [*OLD, ROLLOUT, *NEW]]
    report = verify_chain()
    assert report.ok and report.checked == len(OLD) + 1 + len(NEW), report.problem


def test_an_export_holding_both_names_verifies_offline(chain, api_client_for, tmp_path):
    response = api_client_for("auditor").get("/api/v1/audit/export")
    path = tmp_path / "export.jsonl"
    path.write_bytes(b"".join(response.streaming_content))
    text = path.read_text()
    assert "canary.fault.injected" in text and "chaos.fault.injected" in text
    report = verify_export(path, public_key_path().read_text())
    assert report.ok and report.checked == 7, report.message
    # Renaming an old event in the export breaks it: the hash covers the name as written.
    path.write_text(text.replace("canary.lease.acquired", "chaos.lease.acquired", 1))
    assert not verify_export(path, public_key_path().read_text()).ok


def test_filters_by_action_subsystem_and_target_find_old_and_new_names(chain):
    assert _actions(action="chaos.fault.injected") == [
        "canary.fault.injected",
        "chaos.fault.injected",
    ]
    assert _actions(action="canary.fault.injected") == _actions(action="chaos.fault.injected")
    assert _actions(action="chaos.") == sorted(a for a, _t in [*OLD, *NEW])
    assert _actions(action="chaos.lease.") == ["canary.lease.acquired", "chaos.lease.released"]
    assert _actions(action="canary.") == sorted([*(a for a, _t in OLD), ROLLOUT[0]])
    both = sorted(a for a, _t in [*OLD, *NEW])
    assert _actions(target=f"chaos.chaosexperiment:{EXP}") == both
    assert _actions(target=f"canary.chaosexperiment:{EXP}") == both
    assert _actions(target="canary.rollout:r1") == [ROLLOUT[0]]


def test_the_api_and_the_explorer_page_find_both_names(chain, api_client_for, client):
    rows = api_client_for("auditor").get("/api/v1/audit/events/", {"action": "chaos."}).json()
    assert sorted(r["action"] for r in rows["results"]) == sorted(a for a, _t in [*OLD, *NEW])
    user = User.objects.create_user("auditor-page", password="pw-123456789")
    user.groups.add(Group.objects.get_or_create(name="auditor")[0])
    client.force_login(user)
    html = client.get("/audit/", {"action": "chaos.fault.injected"}).content.decode()
    assert "<code>canary.<wbr>fault.<wbr>injected</code>" in html
    assert "<code>chaos.<wbr>fault.<wbr>injected</code>" in html
    assert "<code>chaos.<wbr>fault.<wbr>reverted</code>" not in html
