"""Provisioning: compose, check manifest policies, apply through the delivery backend, wait for readiness.

With a tenant control plane, two steps outside the plan (portal/services/tenant_cluster.py):
the sink token into the Secret its API server mounts, after apply; the flow-control objects
inside its API server, once it serves (READY waits for them).

`environment_provision` is re-entrant: every step checks what is already done,
apply is server-side-apply (idempotent), so a redelivered task after a killed
worker finishes the job without duplicating anything.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from kiln.cluster import AppliedRef, DeliveryError, HealthStatus
from kiln.cluster.backends import get_backend
from kiln.errors import IllegalTransition
from kiln.identity.permissions import system_actor
from kiln.observability import continue_trace, tracer
from portal import compose as c
from portal import conf
from portal.lifecycle import Status
from portal.models import Environment, PolicyDecision, ProvisioningStep
from portal.services import gate
from portal.services.lifecycle import environment_transition
from portal.services.steps import (
    position_of,
    step_done,
    step_failed,
    step_started,
)
from portal.services.tenancy import datastore_reserve
from portal.services.tenant_cluster import (
    FLOW_STEP,
    TOKEN_STEP,
    tenant_audit_token_deliver,
    tenant_flow_control_seed,
)

PROVISIONER = "provisioner"
READY, PENDING, FAILED, NOOP = "ready", "pending", "failed", "noop"


def environment_spec(*, environment: Environment) -> c.EnvironmentSpec:
    """The composition input of an environment."""
    req = environment.request
    return c.EnvironmentSpec(
        request_id=environment.public_id,
        team=environment.team.slug,
        name=environment.name,
        namespace=environment.namespace,
        env_class=environment.env_class,
        ttl_hours=req.ttl_hours,
        workload_class=req.workload_class,
        cpu=req.cpu,
        memory_gib=req.memory_gib,
        gpu=req.gpu,
        tenant_control_plane=req.tenant_control_plane,
        spot_node_pool=req.spot_node_pool,
        database=req.database,
        team_group=f"kiln:team:{environment.team.slug}",
        datastore=environment.datastore_pool,
        gitops_repo_url=conf.gitops_repo(),
        tenant_audit_sink=conf.tenant_audit_sink(),
    )


def environment_mark_failed(*, environment_id: int, reason: str, step: str = "") -> None:
    """Move a live environment to FAILED (task on_failure and deadlines); a no-op if it already left."""
    env = Environment.objects.filter(pk=environment_id).first()
    if env is None or Status(env.status) not in (
        Status.SUBMITTED,
        Status.PENDING_APPROVAL,
        Status.APPROVED,
        Status.PROVISIONING,
        Status.READY,
        Status.EXPIRING,
        Status.TEARING_DOWN,
    ):
        return
    with continue_trace(env.traceparent, "portal.environment.fail"):
        if step:
            step_failed(environment=env, name=step, detail=reason)
        environment_transition(
            actor=system_actor(PROVISIONER), environment=env, to=Status.FAILED, reason=reason
        )


def environment_provision(*, environment_id: int) -> str:
    """Advance provisioning as far as it can go now: READY, PENDING (check again later), FAILED or NOOP.

    Three transactions when the objects are healthy at once: the start (PROVISIONING, the
    composed manifests, the manifest policies' decision, apply marked running), the delivery
    backend's apply, and the end (the applied objects, apply and ready done, READY). The CPU
    work (composition, the policies) runs before the first one, outside any row lock.
    """
    actor = system_actor(PROVISIONER)
    env = Environment.objects.select_related("team", "request").get(pk=environment_id)
    with continue_trace(env.traceparent, "portal.environment.provision") as span:
        span.set_attribute("kiln.environment", env.public_id)
        if env.status not in (Status.APPROVED, Status.PROVISIONING):
            return NOOP
        # Only PENDING_APPROVAL leads to APPROVED: an environment not yet provisioning has no steps.
        steps = (
            []
            if env.status == Status.APPROVED
            else list(
                ProvisioningStep.objects.filter(environment=env).values_list(
                    "name", "status", "started_at"
                )
            )
        )
        started = _provision_started_at(env, steps)
        done = {name for name, status, _ in steps if status == ProvisioningStep.DONE}
        start = _start(actor=actor, env=env, done=done)
        if start != PENDING:
            return start

        backend = get_backend()
        applied = ""  # what apply did, recorded with the next transaction
        if "apply" not in done:
            with tracer("kiln.portal").start_as_current_span("portal.delivery.apply") as apply_span:
                apply_span.set_attribute("kiln.backend", backend.name)
                refs = backend.apply(env.manifests)  # DeliveryError propagates: the task retries
            env.applied_refs = [r.as_dict() for r in refs]
            applied = f"{len(refs)} objects applied with {backend.name}"

        tenant, delivered = bool(env.request.tenant_control_plane), True
        if applied and tenant:  # the tenant's steps come between apply and ready
            _record_apply(actor=actor, env=env, detail=applied)
            applied = ""
        if tenant and TOKEN_STEP not in done:
            delivered = tenant_audit_token_deliver(
                actor=actor,
                environment=env,
                backend=backend,
                spec=environment_spec(environment=env),
            )

        refs = [AppliedRef.from_dict(r) for r in env.applied_refs]
        healths = backend.health_many(refs)
        degraded = [
            f"{r['kind']} {r['name']}: {h.message}"
            for r, h in zip(env.applied_refs, healths, strict=True)
            if h.status in (HealthStatus.DEGRADED, HealthStatus.MISSING, HealthStatus.DELETING)
        ]
        serving = (
            not degraded and delivered and all(h.status == HealthStatus.HEALTHY for h in healths)
        )
        if serving and tenant and FLOW_STEP not in done:
            serving = tenant_flow_control_seed(
                actor=actor,
                environment=env,
                backend=backend,
                spec=environment_spec(environment=env),
            )
        if serving:
            now = timezone.now()
            try:
                # The transition locks the row and re-checks the status; raising rolls back all.
                with transaction.atomic():
                    if applied:
                        _record_apply(actor=actor, env=env, detail=applied)
                    step_done(
                        actor=actor,
                        environment=env,
                        name="ready",
                        detail=f"{len(healths)} objects healthy",
                    )
                    environment_transition(
                        actor=actor,
                        environment=env,
                        to=Status.READY,
                        reason="every object reports healthy",
                        updates={
                            "ready_at": now,
                            "expires_at": now + timedelta(hours=env.request.ttl_hours),
                        },
                        data={"seconds_to_ready": round((now - env.created_at).total_seconds(), 3)},
                    )
            except IllegalTransition:  # another worker finished (or failed) it first
                if applied:  # what this apply did is kept all the same (done once)
                    _record_apply(actor=actor, env=env, detail=applied)
                return NOOP
            return READY
        if applied:
            _record_apply(actor=actor, env=env, detail=applied)
        if degraded:
            environment_mark_failed(environment_id=env.pk, reason="; ".join(degraded), step="ready")
            return FAILED
        if (timezone.now() - started).total_seconds() > conf.provision_timeout():
            waiting = [
                f"{r['kind']} {r['name']}"
                for r, h in zip(env.applied_refs, healths, strict=True)
                if h.status != HealthStatus.HEALTHY
            ] or ["the tenant API server or its sink token"]
            environment_mark_failed(
                environment_id=env.pk,
                reason=f"not ready within {conf.provision_timeout():.0f}s: {', '.join(waiting)}",
                step="ready",
            )
            return FAILED
        if "ready" not in done:  # one row while waiting, not one write per poll
            ProvisioningStep.objects.get_or_create(
                environment=env,
                name="ready",
                defaults={
                    "position": position_of("ready"),
                    "status": ProvisioningStep.RUNNING,
                    "attempts": 1,
                    "started_at": timezone.now(),
                    "detail": "waiting for every object to report healthy",
                },
            )
        return PENDING


def _start(*, actor, env: Environment, done: set[str]) -> str:
    """The first transaction: PROVISIONING (from APPROVED), the composed manifests, the manifest
    policies' decision and apply marked running, committed together; PENDING to go on to apply,
    else FAILED (composition or a manifest policy) or NOOP (another worker moved it first)."""
    manifests, composition_error = env.manifests, ""
    planned = bool(manifests)
    if "compose" not in done and not manifests:  # else the plan approvers saw, delivered as it is
        try:
            if env.request.tenant_control_plane:  # reserved at submission; older ones here
                datastore_reserve(environment=env)
            manifests = c.compose(environment_spec(environment=env))
        except c.CompositionError as exc:
            composition_error = f"composition failed: {exc}"
    evaluation, stored = None, False
    if not composition_error and "manifest-policy" not in done:
        # The plan's verdicts, stored at submission, when the same policy set still holds.
        evaluation = gate.planned_manifest_evaluation(environment=env) if planned else None
        stored = evaluation is not None
        if evaluation is None:
            with tracer("kiln.portal").start_as_current_span("portal.policy.manifests"):
                evaluation = gate.evaluate_manifests(manifests=manifests)
    with transaction.atomic():
        if env.status == Status.APPROVED:
            try:  # the transition locks the row and re-checks the status itself
                environment_transition(
                    actor=actor,
                    environment=env,
                    to=Status.PROVISIONING,
                    reason="provisioning started",
                )
            except IllegalTransition:  # another worker moved it first: that one provisions
                return NOOP
        if composition_error:
            step_failed(environment=env, name="compose", detail=composition_error)
            environment_transition(
                actor=actor, environment=env, to=Status.FAILED, reason=composition_error
            )
            return FAILED
        if "compose" not in done:
            Environment.objects.filter(pk=env.pk).update(manifests=manifests)
            env.manifests = manifests
            step_done(
                actor=actor,
                environment=env,
                name="compose",
                detail=f"{len(manifests)} manifests",
                data={"kinds": [m["kind"] for m in manifests]},
            )
        if evaluation is not None:
            if (
                not stored
                and not PolicyDecision.objects.filter(
                    environment=env, stage=PolicyDecision.MANIFEST
                ).exists()
            ):
                gate.store_decisions(
                    environment=env, stage=PolicyDecision.MANIFEST, evaluation=evaluation
                )
            if not evaluation.allowed:
                step_failed(environment=env, name="manifest-policy", detail=evaluation.summary())
                environment_transition(
                    actor=system_actor("policy-gate"),
                    environment=env,
                    to=Status.FAILED,
                    reason=f"manifest policy denied: {evaluation.summary()}",
                    data={"policy": gate.decision_summary(evaluation=evaluation)},
                )
                return FAILED
            step_done(
                actor=actor,
                environment=env,
                name="manifest-policy",
                detail=evaluation.summary(),
                data={"policy": gate.decision_summary(evaluation=evaluation)},
            )
        if "apply" not in done:
            step_started(environment=env, name="apply")
    return PENDING


def _record_apply(*, actor, env: Environment, detail: str) -> None:
    """Keep what apply returned and mark the step done (inside the caller's transaction, if any)."""
    with transaction.atomic(savepoint=False):
        Environment.objects.filter(pk=env.pk).update(applied_refs=env.applied_refs)
        step_done(actor=actor, environment=env, name="apply", detail=detail)


def _provision_started_at(env: Environment, steps: list[tuple]):
    started = sorted(at for _, _, at in steps if at is not None)
    return started[0] if started else env.updated_at


__all__ = [
    "DeliveryError",
    "FAILED",
    "NOOP",
    "PENDING",
    "READY",
    "environment_mark_failed",
    "environment_provision",
    "environment_spec",
]
