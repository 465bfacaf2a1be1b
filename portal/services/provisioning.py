"""Provisioning: compose, check manifest policies, apply through the delivery backend, wait for readiness.

With a tenant control plane, two steps outside the plan (portal/services/tenant_cluster.py):
the sink token into the Secret its API server mounts, after apply; the flow-control objects
inside its API server, once it serves (READY waits for them).

Provisioning is a pipeline of steps (`PROVISIONING`, data) run by the one driver
(portal/services/pipeline.py): a step already done is skipped and apply is server-side apply
(idempotent), so a redelivered task after a killed worker finishes the job without
duplicating anything.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from kiln.cluster import AppliedRef, DeliveryError, HealthStatus
from kiln.cluster.backends import get_backend
from kiln.identity.permissions import system_actor
from kiln.observability import continue_trace, tracer
from portal import compose as c
from portal import conf
from portal.lifecycle import Status
from portal.models import Environment, PolicyDecision, ProvisioningStep
from portal.services import gate
from portal.services.lifecycle import environment_transition
from portal.services.pipeline import pipeline_advance
from portal.services.pipeline_data import (
    Move,
    Outcome,
    Pipeline,
    Result,
    Run,
    Step,
    done,
    failed,
    pending,
)
from portal.services.steps import position_of, step_failed
from portal.services.tenancy import datastore_reserve
from portal.services.tenant_cluster import (
    FLOW_STEP,
    TOKEN_STEP,
    tenant_api_server,
    tenant_audit_token_deliver,
    tenant_control_plane_ref,
    tenant_flow_control_seed,
    tenant_namespace_exists,
)
from scheduler.models import InstanceType

PROVISIONER = "provisioner"
READY, PENDING, FAILED, NOOP = "ready", "pending", "failed", "noop"
READY_STEP = "ready"


# Where a backend's apply puts the objects, in the step's words.
APPLIED_TO = {
    "simulated": "the simulated cluster",
    "kubernetes": "the cluster",
    "gitops": "the GitOps repository",
}


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
        node_shapes=node_shapes(),
    )


def node_shapes() -> dict[str, tuple[float, float]]:
    """Each priced instance type's vCPUs and memory (GiB), for the NodePool's limits."""
    return {
        t.name: (float(t.vcpu), float(t.memory_gib))
        for t in InstanceType.objects.only("name", "vcpu", "memory_gib")
    }


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
    return pipeline_advance(PROVISIONING, environment_id=environment_id)


def _compose(run: Run) -> Result:
    """The manifests: the plan approvers saw, delivered as it is, or composed now."""
    env = run.environment
    manifests = env.manifests
    if not manifests:
        try:
            if env.request.tenant_control_plane:  # reserved at submission; older ones here
                datastore_reserve(environment=env)
            manifests = c.compose(environment_spec(environment=env))
        except c.CompositionError as exc:
            return failed(f"composition failed: {exc}")
        run.memo["composed"] = True
    env.manifests = manifests

    def keep() -> None:  # after the entry move, which reads the row back into `env`
        Environment.objects.filter(pk=env.pk).update(manifests=manifests)
        env.manifests = manifests

    return done(
        f"{len(manifests)} manifests", data={"kinds": [m["kind"] for m in manifests]}, record=keep
    )


def _manifest_policy(run: Run) -> Result:
    """The manifest policies' verdict: the plan's, stored at submission, when the same policy
    set still holds; else evaluated now. Every verdict is stored with the decision."""
    env = run.environment
    evaluation = (
        None if run.memo.get("composed") else gate.planned_manifest_evaluation(environment=env)
    )
    stored = evaluation is not None
    if evaluation is None:
        with tracer("kiln.portal").start_as_current_span("portal.policy.manifests"):
            evaluation = gate.evaluate_manifests(manifests=env.manifests)

    def store() -> None:
        if (
            not stored
            and not PolicyDecision.objects.filter(
                environment=env, stage=PolicyDecision.MANIFEST
            ).exists()
        ):
            gate.store_decisions(
                environment=env, stage=PolicyDecision.MANIFEST, evaluation=evaluation
            )

    summary = {"policy": gate.decision_summary(evaluation=evaluation)}
    if not evaluation.allowed:
        return failed(
            f"manifest policy denied: {evaluation.summary()}",
            detail=evaluation.summary(),
            data=summary,
            record=store,
            actor=system_actor("policy-gate"),
        )
    return done(evaluation.summary(), data=summary, record=store)


def _apply(run: Run) -> Result:
    """Server-side apply through the delivery backend (a DeliveryError propagates: the task
    retries); the applied objects are kept with the step's record."""
    env, backend = run.environment, run.backend
    with tracer("kiln.portal").start_as_current_span("portal.delivery.apply") as span:
        span.set_attribute("kiln.backend", backend.name)
        refs = backend.apply(env.manifests)
    env.applied_refs = [r.as_dict() for r in refs]
    applied = env.applied_refs

    def keep() -> None:
        Environment.objects.filter(pk=env.pk).update(applied_refs=applied)
        env.applied_refs = applied

    where = APPLIED_TO.get(backend.name, backend.name)
    return done(f"{len(refs)} objects applied to {where}", record=keep)


def _has_tenant(run: Run) -> bool:
    return bool(run.environment.request.tenant_control_plane)


def _health(run: Run) -> Result | None:
    """Every applied object's health, read once a pass: failed if one is degraded, missing or
    going; pending while one is not yet healthy; None when all serve."""

    def read() -> Result | None:
        env = run.environment
        refs = [AppliedRef.from_dict(r) for r in env.applied_refs]
        healths = run.backend.health_many(refs)
        objects = list(zip(env.applied_refs, healths, strict=True))
        degraded = [
            f"{r['kind']} {r['name']}: {h.message}"
            for r, h in objects
            if h.status in (HealthStatus.DEGRADED, HealthStatus.MISSING, HealthStatus.DELETING)
        ]
        if degraded:
            return failed("; ".join(degraded), failed_step=READY_STEP)
        waiting = tuple(
            f"{r['kind']} {r['name']}" for r, h in objects if h.status != HealthStatus.HEALTHY
        )
        return pending("objects not yet healthy", remaining=waiting) if waiting else None

    return run.once("health", read)


def _token_guard(run: Run) -> Result | None:
    if not tenant_namespace_exists(backend=run.backend, environment=run.environment):
        return pending("the namespace is not in the cluster yet")
    return None


def _token(run: Run) -> Result:
    return tenant_audit_token_deliver(
        environment=run.environment,
        backend=run.backend,
        spec=environment_spec(environment=run.environment),
    )


def _has_control_plane(run: Run) -> bool:
    return _has_tenant(run) and tenant_control_plane_ref(environment=run.environment) is not None


def _flow_guard(run: Run) -> Result | None:
    """The flow control goes in once every object serves and the tenant API server answers."""
    unhealthy = _health(run)
    if unhealthy is not None:
        return unhealthy
    run.memo["tenant"] = tenant_api_server(backend=run.backend, environment=run.environment)
    return (
        None
        if run.memo["tenant"] is not None
        else pending("the tenant API server does not serve yet")
    )


def _flow(run: Run) -> Result:
    return tenant_flow_control_seed(
        tenant=run.memo["tenant"], spec=environment_spec(environment=run.environment)
    )


def _ready(run: Run) -> Result:
    """Ready once every applied object reports healthy."""
    unhealthy = _health(run)
    if unhealthy is not None:
        return unhealthy
    return done(f"{len(run.environment.applied_refs)} objects healthy")


def _provisioning_started_at(run: Run):
    started = sorted(at for _, at in run.rows.values() if at is not None)
    return started[0] if started else run.environment.updated_at


def _waiting(run: Run, step: Step, result: Result) -> Result:
    """A wait fails once an object is degraded or past KILN_PROVISION_TIMEOUT_SECONDS; else the
    ready step keeps one row while it waits (not one write per poll)."""
    unhealthy = _health(run)
    if unhealthy is not None and unhealthy.outcome == Outcome.FAILED:
        return unhealthy
    if (timezone.now() - _provisioning_started_at(run)).total_seconds() > conf.provision_timeout():
        waiting = list(unhealthy.remaining if unhealthy else ()) or [
            "the tenant API server or its sink token"
        ]
        return failed(
            f"not ready within {conf.provision_timeout():.0f}s: {', '.join(waiting)}",
            failed_step=READY_STEP,
        )
    ProvisioningStep.objects.get_or_create(
        environment=run.environment,
        name=READY_STEP,
        defaults={
            "position": position_of(READY_STEP),
            "status": ProvisioningStep.RUNNING,
            "attempts": 1,
            "started_at": timezone.now(),
            "detail": "waiting for every object to report healthy",
        },
    )
    return result


def _entry(run: Run) -> Move:
    return Move("provisioning started")


def _end(run: Run) -> Move:
    env, now = run.environment, timezone.now()
    return Move(
        "every object reports healthy",
        updates={"ready_at": now, "expires_at": now + timedelta(hours=env.request.ttl_hours)},
        data={"seconds_to_ready": round((now - env.created_at).total_seconds(), 3)},
    )


PROVISIONING = Pipeline(
    name="provisioning",
    span="portal.environment.provision",
    actor=PROVISIONER,
    steps=(
        Step("compose", _compose, starts=False),
        Step("manifest-policy", _manifest_policy, starts=False),
        Step("apply", _apply),
        Step(TOKEN_STEP, _token, guard=_token_guard, when=_has_tenant),
        Step(FLOW_STEP, _flow, guard=_flow_guard, when=_has_control_plane),
        Step(READY_STEP, _ready, starts=False),
    ),
    enters_from=Status.APPROVED,
    runs_in=Status.PROVISIONING,
    ends_in=Status.READY,
    entry=_entry,
    end=_end,
    backend=lambda: get_backend(),  # looked up when a pass needs it (tests replace it)
    waiting=_waiting,
    joins_request_trace=True,
)


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
