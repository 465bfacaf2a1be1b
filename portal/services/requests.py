"""Submitting an environment request: validation, idempotency, the request policy gate, auto-approval."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import IntegrityError, transaction

import audit
from kiln.errors import Conflict, Forbidden, IdempotencyKeyReused, InvalidInput
from kiln.identity.models import Team
from kiln.identity.permissions import (
    Actor,
    can_request_environment,
    can_view_environment,
    system_actor,
)
from kiln.observability import current_traceparent, tracer
from portal import compose as c
from portal import conf, policy, selectors
from portal.lifecycle import Status
from portal.models import Environment, EnvironmentRequest, PolicyDecision
from portal.services import budgets, cost, gate, plan, tenancy
from portal.services.lifecycle import audit_target, environment_transition
from portal.services.queueing import enqueue_provisioning
from portal.validation import FIELDS, field_errors, namespace_for


def body_hash(*, data: dict[str, Any]) -> str:
    """SHA-256 of the request's fields in canonical order (what an Idempotency-Key is bound to)."""
    canonical = json.dumps({k: data.get(k) for k in FIELDS}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _existing_for_key(actor: Actor, key: str, digest: str) -> Environment | None:
    """The environment this caller submitted before with this key, if any (the key reused with
    another body raises IdempotencyKeyReused, naming the environment only to one who sees it)."""
    if not key or actor.user_id is None:
        return None
    previous = (
        EnvironmentRequest.objects.select_related("environment", "team")
        .filter(requested_by_id=actor.user_id, idempotency_key=key)
        .first()
    )
    if previous is None:
        return None
    if previous.body_sha256 != digest:
        visible = can_view_environment(actor, previous.team.slug)
        raise IdempotencyKeyReused(
            "this Idempotency-Key was already used with a different request",
            extra={"environment": previous.environment.public_id} if visible else {},
        )
    return previous.environment


def _replayed(*, actor: Actor, env: Environment) -> Environment:
    """A retried request's environment, as a GET by the same caller answers it.

    The key was the caller's, but what it answers is decided now: one who can no longer see
    the environment (left the team, lost the role) gets the GET's 404 and changes nothing.
    One still APPROVED has its provisioning queued again, if the caller may still request
    environments for its team: the client retries because the first answer failed, and when
    that was the broker, down as the first task was sent, this retry gets it going before the
    reaper's next pass (the task checks the state first, so a second one changes nothing).
    """
    env = selectors.environment_get(viewer=actor, public_id=env.public_id)
    if env.status == Status.APPROVED and can_request_environment(actor, env.team.slug):
        with transaction.atomic():
            enqueue_provisioning(environment=env)
    return env


def _replay(actor: Actor, key: str, digest: str) -> Environment | None:
    """The replayed answer for a key this caller used before, or None for a new key."""
    existing = _existing_for_key(actor, key, digest)
    return None if existing is None else _replayed(actor=actor, env=existing)


def environment_request_submit(
    *, actor: Actor, data: dict[str, Any], idempotency_key: str = ""
) -> tuple[Environment, bool]:
    """Submit a request; returns (environment, created). A retried Idempotency-Key returns the first one.

    Policy denial is a transition to DENIED that is committed and audited, not an exception.
    ephemeral and dev move straight to APPROVED when every policy allows.
    """
    data = {k: data.get(k) for k in FIELDS}
    data["justification"] = data.get("justification") or ""
    errors = field_errors(data)
    if errors:
        raise InvalidInput("The request is invalid.", extra={"fields": errors})
    if len(idempotency_key) > 200:
        raise InvalidInput("Idempotency-Key is at most 200 characters.")
    digest = body_hash(data=data)
    replayed = _replay(actor, idempotency_key, digest)
    if replayed is not None:
        return replayed, False
    team = Team.objects.filter(slug=data["team"]).first()
    if team is None:
        raise InvalidInput("The request is invalid.", extra={"fields": {"team": ["No such team."]}})
    if not can_request_environment(actor, team.slug):
        raise Forbidden("you may request environments only for your own team, as an engineer")
    if actor.user_id is None:
        raise Forbidden("environment requests need a person")
    namespace = namespace_for(team.slug, data["name"])
    live = [s.value for s in Status if s not in (Status.DENIED, Status.REJECTED, Status.DELETED)]
    if Environment.objects.filter(namespace=namespace, status__in=live).exists():
        # A concurrent retry with this key may have committed since the look-up above.
        return _replayed_or_taken(actor, idempotency_key, digest, data=data, team=team)

    if data["tenant_control_plane"]:
        tenancy.datastore_pools()  # a pool spec that does not parse: 503, nothing written
    with tracer("kiln.portal").start_as_current_span("portal.policy.request"):
        evaluation = gate.evaluate_request(actor=actor, data=data)
    estimate = cost.estimate(
        env_class=data["env_class"],
        ttl_hours=data["ttl_hours"],
        cpu=data["cpu"],
        memory_gib=data["memory_gib"],
        gpu=data["gpu"],
        spot=data["spot_node_pool"],
        tenant_control_plane=data["tenant_control_plane"],
        database=data["database"],
    )
    # Spend at the budget: refused here, with the figures, before anything is written.
    budget = budgets.budget_check_request(
        actor=actor, team=team, hourly=estimate["hourly"], ttl_hours=data["ttl_hours"]
    )
    try:
        with transaction.atomic():
            env = _create(
                actor,
                team,
                data,
                key=idempotency_key,
                digest=digest,
                evaluation=evaluation,
                estimate=estimate,
                budget=budget,
            )
    except IntegrityError:
        # A concurrent retry with the same key, or a concurrent request for the same name.
        return _replayed_or_taken(actor, idempotency_key, digest, data=data, team=team)
    return env, True


def _replayed_or_taken(
    actor: Actor, key: str, digest: str, *, data: dict[str, Any], team: Team
) -> tuple[Environment, bool]:
    """The environment an earlier request with this key made (not created now), else a Conflict:
    the name is taken."""
    replayed = _replay(actor, key, digest)
    if replayed is not None:
        return replayed, False
    taken = f"{team.slug} already has an environment named {data['name']}: choose another name."
    raise Conflict(
        f"an environment named {data['name']} already exists for {team.slug}",
        extra={"fields": {"name": [taken]}},
    ) from None


def _create(
    actor: Actor,
    team: Team,
    data: dict[str, Any],
    *,
    key: str,
    digest: str,
    evaluation: policy.Evaluation,
    estimate: dict[str, Any],
    budget: budgets.RequestBudget | None = None,
) -> Environment:
    """Insert the request and its environment, audit the submission, store the gate's verdicts
    and move the environment on: DENIED, PENDING_APPROVAL, or APPROVED (and queued) for the
    classes approved automatically, unless its cost this month takes the team's forecast over
    its budget: then it waits for an approver, whatever its class."""
    namespace = namespace_for(team.slug, data["name"])
    request = EnvironmentRequest.objects.create(
        team=team,
        name=data["name"],
        env_class=data["env_class"],
        ttl_hours=data["ttl_hours"],
        workload_class=data["workload_class"],
        cpu=data["cpu"],
        memory_gib=data["memory_gib"],
        gpu=data["gpu"],
        tenant_control_plane=data["tenant_control_plane"],
        spot_node_pool=data["spot_node_pool"],
        database=data["database"],
        justification=data["justification"],
        requested_by_id=actor.user_id,
        idempotency_key=key,
        body_sha256=digest,
    )
    env = Environment.objects.create(
        request=request,
        team=team,
        name=data["name"],
        namespace=namespace,
        env_class=data["env_class"],
        status=Status.SUBMITTED.value,
        policy_version=evaluation.version,
        hourly_cost=estimate["hourly"],
        asleep_hourly_cost=estimate["asleep_hourly"],
        traceparent=current_traceparent(),
    )
    audit.record(
        actor,
        "portal.environment.submitted",
        audit_target(env),
        {
            "request": {k: data[k] for k in FIELDS if k != "justification"},
            "justification": data["justification"],
            "namespace": namespace,
            "team": team.slug,
            "policy_version": evaluation.version,
            "hourly_cost": estimate["hourly"],
            "asleep_hourly_cost": estimate["asleep_hourly"],
            "idempotency_key": bool(key),
            "budget": budget.as_dict() if budget is not None else None,
        },
    )
    gate.store_decisions(environment=env, stage=PolicyDecision.REQUEST, evaluation=evaluation)
    allowed, reason = evaluation.allowed, evaluation.summary()
    if allowed and data["tenant_control_plane"]:
        try:  # a request past every pool's cap is denied with the pools' fill, never placed
            tenancy.datastore_reserve(environment=env)
        except c.PoolsExhausted as exc:
            allowed, reason = False, f"no datastore pool can take a tenant control plane: {exc}"
    over_budget = allowed and budget is not None and budget.needs_approval
    if over_budget:
        reason = f"{reason}; {budgets.budget_approval_reason(budget)}"
    # The gate's verdict is a transition either way: a denial is committed and audited too.
    environment_transition(
        actor=system_actor("policy-gate"),
        environment=env,
        to=Status.PENDING_APPROVAL if allowed else Status.DENIED,
        reason=reason,
        data={"policy": gate.decision_summary(evaluation=evaluation)},
        created_in_this_transaction=True,
    )
    if not allowed:
        return env
    if env.env_class not in conf.auto_approve_classes() or over_budget:
        # The plan approvers see: composed now, delivered as it is (portal.services.plan).
        # Classes approved automatically have no approver to show it to: they compose in
        # provisioning, as before, and keep the submission's few queries.
        plan.environment_plan_make(actor=system_actor("policy-gate"), environment=env)
        return env
    environment_transition(
        actor=system_actor("auto-approval"),
        environment=env,
        to=Status.APPROVED,
        reason=f"{env.env_class} environments are approved automatically when every policy allows",
        created_in_this_transaction=True,
    )
    enqueue_provisioning(environment=env)
    return env
