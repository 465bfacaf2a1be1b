"""Portal writes: every state change of requests and environments happens here, audited."""

from portal.services.approvals import (
    AlreadyDecided,
    SelfApprovalForbidden,
    environment_approve,
    environment_reject,
)
from portal.services.expiry import (
    environment_defer_teardown,
    environment_expire,
    environment_extend,
    environment_keep,
)
from portal.services.lifecycle import audit_target, environment_transition
from portal.services.notices import notification_send
from portal.services.provisioning import environment_mark_failed, environment_provision
from portal.services.reaper import environments_reap_expired
from portal.services.requests import IdempotencyKeyReused, environment_request_submit
from portal.services.teardown import environment_teardown, environment_teardown_request

__all__ = [
    "AlreadyDecided",
    "IdempotencyKeyReused",
    "SelfApprovalForbidden",
    "audit_target",
    "environment_approve",
    "environment_defer_teardown",
    "environment_expire",
    "environment_keep",
    "notification_send",
    "environment_extend",
    "environment_mark_failed",
    "environment_provision",
    "environment_reject",
    "environment_request_submit",
    "environment_teardown",
    "environment_teardown_request",
    "environment_transition",
    "environments_reap_expired",
]
