"""The environment lifecycle as data: statuses and the only transitions allowed between them.

    SUBMITTED -> DENIED (policy) | PENDING_APPROVAL -> APPROVED | REJECTED
    APPROVED -> PROVISIONING -> READY -> EXPIRING -> TEARING_DOWN -> DELETED
    READY -> SLEEPING -> WAKING -> READY (workloads, control plane and nodes to zero and back)
    any live step -> FAILED; teardown timeout -> QUARANTINED (owned by a person)

A FAILED or QUARANTINED environment may still hold resources, so both lead back
into TEARING_DOWN; nothing leaves DENIED, REJECTED or DELETED. A sleeping environment's TTL
keeps running: SLEEPING -> EXPIRING takes it to teardown like a READY one.
"""

from __future__ import annotations

from enum import StrEnum

from kiln.identity import components as c
from portal.words import REAPER_PREFIX


class Status(StrEnum):
    """Where an environment is in its life."""

    SUBMITTED = "SUBMITTED"
    DENIED = "DENIED"
    PENDING_APPROVAL = "PENDING_APPROVAL"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    PROVISIONING = "PROVISIONING"
    READY = "READY"
    SLEEPING = "SLEEPING"
    WAKING = "WAKING"
    EXPIRING = "EXPIRING"
    TEARING_DOWN = "TEARING_DOWN"
    DELETED = "DELETED"
    FAILED = "FAILED"
    QUARANTINED = "QUARANTINED"


S = Status
TRANSITIONS: dict[Status, frozenset[Status]] = {
    S.SUBMITTED: frozenset({S.DENIED, S.PENDING_APPROVAL, S.FAILED}),
    S.PENDING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.FAILED}),
    S.APPROVED: frozenset({S.PROVISIONING, S.FAILED}),
    S.PROVISIONING: frozenset({S.READY, S.FAILED}),
    S.READY: frozenset({S.EXPIRING, S.SLEEPING, S.FAILED}),
    S.SLEEPING: frozenset({S.WAKING, S.EXPIRING, S.FAILED}),
    S.WAKING: frozenset({S.READY, S.FAILED}),
    S.EXPIRING: frozenset({S.TEARING_DOWN, S.FAILED}),
    S.TEARING_DOWN: frozenset({S.DELETED, S.QUARANTINED, S.FAILED}),
    S.FAILED: frozenset({S.TEARING_DOWN}),
    S.QUARANTINED: frozenset({S.TEARING_DOWN}),
    S.DENIED: frozenset(),
    S.REJECTED: frozenset(),
    S.DELETED: frozenset(),
}

# The audit action's past verb for arriving in each status: portal.environment.<verb>.
ARRIVAL_VERB: dict[Status, str] = {
    S.SUBMITTED: "submitted",
    S.DENIED: "denied",
    S.PENDING_APPROVAL: "queued_for_approval",
    S.APPROVED: "approved",
    S.REJECTED: "rejected",
    S.PROVISIONING: "provisioning_started",
    S.READY: "readied",
    S.SLEEPING: "sleep_started",
    S.WAKING: "wake_started",
    S.EXPIRING: "expiry_started",
    S.TEARING_DOWN: "teardown_started",
    S.DELETED: "deleted",
    S.FAILED: "failed",
    S.QUARANTINED: "quarantined",
}

# Whose job each move is: the states a background component may move an environment to, by
# the capability of its job (kiln.identity.components; asked by can_move_environment). A
# person's move is checked by the service that makes it, with the person's own predicate.
JOB_MOVES: dict[str, frozenset[Status]] = {
    c.ENV_POLICY: frozenset({S.DENIED, S.PENDING_APPROVAL, S.FAILED}),
    c.ENV_AUTO_APPROVE: frozenset({S.APPROVED}),
    c.ENV_PROVISION: frozenset({S.PROVISIONING, S.READY, S.FAILED}),
    c.ENV_TEARDOWN: frozenset({S.EXPIRING, S.TEARING_DOWN, S.DELETED, S.QUARANTINED, S.FAILED}),
    c.ENV_SLEEP: frozenset({S.SLEEPING, S.WAKING, S.READY, S.FAILED}),
}

TERMINAL = frozenset(s for s, targets in TRANSITIONS.items() if not targets)
# Statuses that hold (or may hold) cluster resources or a claim on a name.
LIVE = frozenset(set(Status) - TERMINAL)


def is_allowed(current: Status | str, target: Status | str) -> bool:
    """True if the table allows moving from `current` to `target`."""
    return Status(target) in TRANSITIONS[Status(current)]


def badge(status: Status | str) -> str:
    """CSS badge class for a status: ok, warn, bad or muted."""
    status = Status(status)
    if status == S.READY:
        return "ok"
    if status in (S.DENIED, S.REJECTED, S.FAILED, S.QUARANTINED):
        return "bad"
    if status in (S.DELETED, S.SLEEPING):
        return "muted"
    return "warn"


# What a person reads for each status (the raw value stays in the API and the audit chain).
LABELS: dict[Status, str] = {
    S.SUBMITTED: "Submitted",
    S.DENIED: "Denied by policy",
    S.PENDING_APPROVAL: "Waiting for approval",
    S.APPROVED: "Approved",
    S.REJECTED: "Rejected",
    S.PROVISIONING: "Provisioning",
    S.READY: "Ready",
    S.SLEEPING: "Sleeping",
    S.WAKING: "Waking",
    S.EXPIRING: "Expired",
    S.TEARING_DOWN: "Tearing down",
    S.DELETED: "Deleted",
    S.FAILED: "Failed",
    S.QUARANTINED: "Quarantined",
}
# The reaper's reason for READY -> EXPIRING; any other reason is a person asking for teardown.
TTL_EXPIRED_PREFIX = REAPER_PREFIX

# Who put an environment to sleep (`Environment.sleep_trigger`); the team's schedule wakes only
# what it or inactivity put to sleep, never what a person or the budget did.
OWNER, INACTIVITY, SCHEDULE, BUDGET, KUBECTL = (
    "owner",
    "inactivity",
    "schedule",
    "budget",
    "kubectl",
)
TRIGGERS = (OWNER, INACTIVITY, SCHEDULE, BUDGET, KUBECTL)
WOKEN_BY_SCHEDULE = (SCHEDULE, INACTIVITY)


def teardown_requested(status: Status | str, reason: str = "") -> bool:
    """EXPIRING because a person asked for the teardown, not because the TTL ran out."""
    return Status(status) == S.EXPIRING and not (reason or "").startswith(TTL_EXPIRED_PREFIX)


def label(status: Status | str, reason: str = "") -> str:
    """The status in words: EXPIRING reads "Teardown requested" when a person asked for it."""
    if teardown_requested(status, reason):
        return "Teardown requested"
    return LABELS[Status(status)]
