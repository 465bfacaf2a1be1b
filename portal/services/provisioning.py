"""Provisioning: compose, check manifest policies, apply through the delivery backend, wait for readiness.

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
    """Advance provisioning as far as it can go now: READY, PENDING (check again later), FAILED or NOOP."""
    actor = system_actor(PROVISIONER)
    env = Environment.objects.select_related("team", "request").get(pk=environment_id)
    with continue_trace(env.traceparent, "portal.environment.provision") as span:
        span.set_attribute("kiln.environment", env.public_id)
        if env.status == Status.APPROVED:
            try:  # the transition locks the row and re-checks the status itself
                environment_transition(
                    actor=actor,
                    environment=env,
                    to=Status.PROVISIONING,
                    reason="provisioning started",
                )
            except IllegalTransition:  # another worker moved it first
                env.refresh_from_db()
        if env.status != Status.PROVISIONING:
            return NOOP
        steps = list(
            ProvisioningStep.objects.filter(environment=env).values_list(
                "name", "status", "started_at"
            )
        )
        started = _provision_started_at(env, steps)
        done = {name for name, status, _ in steps if status == ProvisioningStep.DONE}

        if "compose" in done or env.manifests:  # the plan approvers saw, delivered as it is
            manifests = env.manifests
        else:
            try:
                if env.request.tenant_control_plane:  # reserved at submission; older ones here
                    datastore_reserve(environment=env)
                manifests = c.compose(environment_spec(environment=env))
            except c.CompositionError as exc:
                environment_mark_failed(
                    environment_id=env.pk, reason=f"composition failed: {exc}", step="compose"
                )
                return FAILED
        evaluation = None
        if "manifest-policy" not in done:
            with tracer("kiln.portal").start_as_current_span("portal.policy.manifests"):
                evaluation = gate.evaluate_manifests(manifests=manifests)
        # The composed manifests and the policy decision on them commit (and are audited) together.
        with transaction.atomic():
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
                if not PolicyDecision.objects.filter(
                    environment=env, stage=PolicyDecision.MANIFEST
                ).exists():
                    gate.store_decisions(
                        environment=env, stage=PolicyDecision.MANIFEST, evaluation=evaluation
                    )
                if not evaluation.allowed:
                    step_failed(
                        environment=env,
                        name="manifest-policy",
                        detail=evaluation.summary(),
                    )
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

        backend = get_backend()
        if "apply" not in done:
            step_started(environment=env, name="apply")
            with tracer("kiln.portal").start_as_current_span("portal.delivery.apply") as apply_span:
                apply_span.set_attribute("kiln.backend", backend.name)
                refs = backend.apply(env.manifests)  # DeliveryError propagates: the task retries
            applied = [r.as_dict() for r in refs]
            Environment.objects.filter(pk=env.pk).update(applied_refs=applied)
            env.applied_refs = applied
            step_done(
                actor=actor,
                environment=env,
                name="apply",
                detail=f"{len(refs)} objects applied with {backend.name}",
            )

        refs = [AppliedRef.from_dict(r) for r in env.applied_refs]
        healths = backend.health_many(refs)
        degraded = [
            f"{r['kind']} {r['name']}: {h.message}"
            for r, h in zip(env.applied_refs, healths, strict=True)
            if h.status in (HealthStatus.DEGRADED, HealthStatus.MISSING, HealthStatus.DELETING)
        ]
        if degraded:
            environment_mark_failed(environment_id=env.pk, reason="; ".join(degraded), step="ready")
            return FAILED
        if all(h.status == HealthStatus.HEALTHY for h in healths):
            now = timezone.now()
            try:
                # The transition locks the row and re-checks the status; raising rolls back both.
                with transaction.atomic():
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
                return NOOP
            return READY
        if (timezone.now() - started).total_seconds() > conf.provision_timeout():
            waiting = [
                f"{r['kind']} {r['name']}"
                for r, h in zip(env.applied_refs, healths, strict=True)
                if h.status != HealthStatus.HEALTHY
            ]
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
