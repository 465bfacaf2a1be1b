"""What the portal's pages say about an environment's history: audit actions in plain words.

Pure: takes (actor, action, data) triples in order, returns one phrase each; no Django.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

AUTO_APPROVER = "system:auto-approval"
REAPER_PREFIX = "TTL expired"

_PHRASES = {
    "submitted": "Requested",
    "denied": "Denied by policy",
    "approved": "Approved",
    "rejected": "Rejected",
    "provisioning_started": "Provisioning started",
    "readied": "Ready",
    "teardown_started": "Teardown started",
    "workloads_removed": "Workloads removed",
    "nodes_drained": "Own nodes drained and removed",
    "deleted": "Deleted",
    "failed": "Failed",
    "quarantined": "Quarantined",
}


def phrase(actor: str, action: str, data: dict[str, Any], following: str = "") -> str:
    """One event in words; `following` is the next event's actor (an automatic approval right
    after the policy gate means the request never waited in a queue)."""
    verb = action.rsplit(".", 1)[-1]
    if action.endswith("provisioning_step.completed"):
        return f"Step {data.get('step', '?')} done"
    if action.endswith("provisioning_step.failed"):
        return f"Step {data.get('step', '?')} failed"
    if verb == "queued_for_approval":
        # "by system:policy-gate" follows: the gate allowed it, a person is to approve it.
        return (
            "Policies allowed"
            if following == AUTO_APPROVER
            else "Policies allowed; waiting for approval"
        )
    if verb == "approved" and actor == AUTO_APPROVER:
        return "Approved automatically"
    if verb == "extended":
        return f"TTL extended by {data.get('hours', '?')} h"
    if verb == "expiry_started":
        reason = str(data.get("reason", ""))
        return "TTL expired" if reason.startswith(REAPER_PREFIX) else "Teardown requested"
    return _PHRASES.get(verb, verb.replace("_", " ").capitalize())


def phrases(events: Sequence[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """`phrase` for each (actor, action, data) in order."""
    out = []
    for i, (actor, action, data) in enumerate(events):
        following = events[i + 1][0] if i + 1 < len(events) else ""
        out.append(phrase(actor, action, data, following))
    return out


def extended_hours(events: Sequence[tuple[str, str, dict[str, Any]]]) -> int:
    """Hours added to the TTL since the request."""
    return sum(
        int(data.get("hours") or 0) for _, action, data in events if action.endswith(".extended")
    )


# On whose behalf an approver acts for a team (kiln.identity.permissions.approval_basis).
_BASIS = {
    "member": "as one of the team's approvers",
    "change-board": "for the central change board (KILN_APPROVERS_GLOBAL)",
    "platform-admin": "as a platform admin",
}


def approval_basis_words(basis: str | None, team: str) -> str:
    """Why a viewer's approval would count for `team`, in words ("" when it would not)."""
    return _BASIS[basis].format(team=team) if basis in _BASIS else ""


def with_article(word: str) -> str:
    """`word` after its article: "a dev", "an ephemeral"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def lifetime_words(env_class: str, limit_hours: int) -> str:
    """How long the class lives, as a refused extension says it."""
    return (
        f"{with_article(env_class).capitalize()} environment lives at most {limit_hours} h in all"
    )
