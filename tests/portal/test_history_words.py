"""An environment's history in words (portal/words.py): who did what, as a person reads it."""

from __future__ import annotations

from portal.words import AUTO_APPROVER, phrases


def test_a_request_the_gate_let_through_waits_for_a_person_not_for_the_gate():
    queued = ("system:policy-gate", "portal.environment.queued_for_approval", {})
    said = phrases([queued, ("carol", "portal.environment.approved", {})])
    assert said == ["Policies allowed; waiting for approval", "Approved"]
    automatic = phrases([queued, (AUTO_APPROVER, "portal.environment.approved", {})])
    assert automatic == ["Policies allowed", "Approved automatically"]
