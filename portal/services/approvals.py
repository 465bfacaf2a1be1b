"""Approvals: separation of duties, two distinct approvers for prod, reasons required to reject."""

from __future__ import annotations

from django.db import transaction

import audit
from kiln.errors import Conflict, Forbidden, IllegalTransition, InvalidInput
from kiln.identity.permissions import APPROVER, Actor, approval_basis, can_approve, has_role
from kiln.observability import continue_trace
from portal.lifecycle import Status, label
from portal.models import ApprovalDecision, Environment
from portal.selectors import approvals_needed
from portal.services.lifecycle import audit_target, environment_transition
from portal.services.queueing import enqueue_provisioning


class SelfApprovalForbidden(Forbidden):
    """Nobody approves (or rejects) their own request."""

    code = "self_approval_forbidden"


class NotApproverOfTeam(Forbidden):
    """An approver decides only for the teams they act for (their own, or every team under
    KILN_APPROVERS_GLOBAL)."""

    code = "not_approver_of_team"


class AlreadyDecided(Conflict):
    """This approver has already decided on this request."""

    code = "already_decided"


def _check(*, actor: Actor, env: Environment, verb: str) -> None:
    requester = env.request.requested_by.get_username()
    if not has_role(actor, APPROVER) or actor.is_system:
        raise Forbidden(f"only approvers may {verb} environment requests")
    if not can_approve(actor, env.team.slug):
        raise NotApproverOfTeam(
            f"you {verb} requests of your own teams only; this one is team {env.team.slug}'s",
            extra={"team": env.team.slug},
        )
    if not can_approve(actor, env.team.slug, requester):
        raise SelfApprovalForbidden(f"you cannot {verb} your own request")
    if env.status != Status.PENDING_APPROVAL:
        raise IllegalTransition(
            f"cannot {verb} {env.namespace}: its status is {label(env.status, env.status_reason)}, "
            "and only a request waiting for approval can be decided",
            extra={"from": env.status, "environment": env.public_id},
        )
    if ApprovalDecision.objects.filter(environment=env, approver_name=actor.username).exists():
        raise AlreadyDecided(f"you have already decided on {env.namespace}")


def _decision_store(
    *, actor: Actor, environment: Environment, decision: str, reason: str
) -> Environment:
    """Lock the environment, check this approver may decide on it now, and store the decision;
    returns the locked row. The caller's transaction holds the lock."""
    env = (
        Environment.objects.select_for_update()
        .select_related("request__requested_by")
        .get(pk=environment.pk)
    )
    _check(actor=actor, env=env, verb=decision)
    ApprovalDecision.objects.create(
        environment=env,
        approver_id=actor.user_id,
        approver_name=actor.username,
        decision=decision,
        reason=reason,
    )
    return env


def environment_approve(*, actor: Actor, environment: Environment, reason: str = "") -> Environment:
    """Record one approval; the environment is APPROVED (and provisioned) once enough distinct approvers agree.

    Runs in the submitting request's trace (the approver's request is linked), and so does the
    provisioning it queues."""
    with (
        continue_trace(environment.traceparent, "portal.environment.approve"),
        transaction.atomic(),
    ):
        env = _decision_store(
            actor=actor, environment=environment, decision=ApprovalDecision.APPROVE, reason=reason
        )
        approvals = ApprovalDecision.objects.filter(
            environment=env, decision=ApprovalDecision.APPROVE
        ).count()
        needed = approvals_needed(environment=env)
        audit.record(
            actor,
            "portal.approval.recorded",
            audit_target(env),
            {
                "decision": "approve",
                "reason": reason,
                "approvals": approvals,
                "needed": needed,
                "on_behalf_of": env.team.slug,
                "as": approval_basis(actor, env.team.slug),
            },
        )
        if approvals >= needed:
            environment_transition(
                actor=actor,
                environment=env,
                to=Status.APPROVED,
                reason=reason or f"approved by {approvals} approver{'s' if approvals != 1 else ''}",
                data={
                    "approvers": list(
                        ApprovalDecision.objects.filter(
                            environment=env, decision=ApprovalDecision.APPROVE
                        ).values_list("approver_name", flat=True)
                    )
                },
            )
            enqueue_provisioning(environment=env)
    environment.refresh_from_db()
    return environment


def environment_reject(*, actor: Actor, environment: Environment, reason: str) -> Environment:
    """Reject a pending request; a reason is required."""
    if not (reason or "").strip():
        raise InvalidInput(
            "a reason is required to reject", extra={"fields": {"reason": ["Required."]}}
        )
    with (
        continue_trace(environment.traceparent, "portal.environment.reject"),
        transaction.atomic(),
    ):
        env = _decision_store(
            actor=actor,
            environment=environment,
            decision=ApprovalDecision.REJECT,
            reason=reason.strip(),
        )
        audit.record(
            actor,
            "portal.approval.recorded",
            audit_target(env),
            {
                "decision": "reject",
                "reason": reason.strip(),
                "on_behalf_of": env.team.slug,
                "as": approval_basis(actor, env.team.slug),
            },
        )
        environment_transition(
            actor=actor, environment=env, to=Status.REJECTED, reason=reason.strip()
        )
    environment.refresh_from_db()
    return environment
