"""What Kiln writes for a tenant control plane outside the GitOps plan, through the cluster
interface, and how teardown waits for the tenant's audit trail.

- `tenant-audit-token` (provisioning, after apply): a fresh sink token is written to the
  Secret the TenantControlPlane mounts for its audit webhook (`backend.write_secret`: straight
  to the cluster, never into the plan or Git) and only then its hash is stored, so a worker
  killed in between leaves a token nobody accepts, replaced on the retry.
- `tenant-flow-control` (provisioning, once the control plane is healthy): the FlowSchema and
  PriorityLevelConfiguration are applied inside the tenant's own API server
  (`backend.tenant(...)`); READY waits for it.
- `tenant-audit-acknowledged` (teardown, before the control plane goes): those objects are
  deleted through the tenant API server, the last requests Kiln makes to it, and teardown waits
  until the archive holds their completed `delete` events. kube-apiserver's batch webhook sends
  its buffer in order, so once they are in, everything before them is too. Past
  KILN_TENANT_AUDIT_ACK_SECONDS teardown goes on and audits that the evidence may be incomplete.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

import audit
from kiln.cluster import AppliedRef, DeliveryBackend, ref_of
from kiln.identity.permissions import Actor
from portal import compose as c
from portal import conf
from portal.models import Environment, ProvisioningStep
from portal.services.lifecycle import audit_target
from portal.services.steps import step_detail, step_done, step_started
from portal.services.tenant_audit import (
    deletions_unacknowledged,
    new_sink_token,
    sink_token_issued,
    tenant_audit_token_store,
)
from portal.tenant_audit import resource_of

TOKEN_STEP = "tenant-audit-token"  # noqa: S105 - a step's name
FLOW_STEP = "tenant-flow-control"
ACK_STEP = "tenant-audit-acknowledged"
TCP_KIND = "TenantControlPlane"


def control_plane_of(refs: list[AppliedRef]) -> AppliedRef | None:
    """The environment's TenantControlPlane among its objects, or None."""
    return next((r for r in refs if r.kind == TCP_KIND), None)


def tenant_audit_token_deliver(
    *, actor: Actor, environment: Environment, backend: DeliveryBackend, spec: c.EnvironmentSpec
) -> bool:
    """Write a fresh sink token into the Secret the tenant API server mounts, then keep its hash;
    False (nothing written) while the namespace is not in the cluster yet, as behind Argo CD
    before its sync."""
    if backend.get("v1", "Namespace", None, spec.namespace) is None:
        return False
    token, name = new_sink_token(), c.audit_token_secret_name(spec)
    step_started(environment=environment, name=TOKEN_STEP)
    backend.write_secret(
        namespace=spec.namespace, name=name, data={c.TOKEN_KEY: token}, labels=c.labels(spec)
    )
    with transaction.atomic():
        tenant_audit_token_store(environment=environment, token=token)
        step_done(
            actor=actor,
            environment=environment,
            name=TOKEN_STEP,
            detail=f"sink token written to Secret {spec.namespace}/{name} (not committed)",
            data={"secret": f"{spec.namespace}/{name}"},
        )
    return True


def tenant_flow_control_seed(
    *, actor: Actor, environment: Environment, backend: DeliveryBackend, spec: c.EnvironmentSpec
) -> bool:
    """Apply the flow-control objects inside the tenant's API server; False while it does not serve."""
    control_plane = control_plane_of([ref_of(m) for m in environment.manifests])
    if control_plane is None:
        return True
    tenant = backend.tenant(namespace=control_plane.namespace, name=control_plane.name)
    if tenant is None:
        return False
    step_started(environment=environment, name=FLOW_STEP)
    refs = tenant.apply(c.tenant_flow_control(spec))
    step_done(
        actor=actor,
        environment=environment,
        name=FLOW_STEP,
        detail=f"{len(refs)} objects applied in the tenant API server",
        data={"objects": [str(r) for r in refs]},
    )
    return True


def _wanted(spec: c.EnvironmentSpec) -> list[tuple[str, str, str]]:
    """The (resource, namespace, name) of what teardown deletes through the tenant API server."""
    return [
        (resource_of(r.kind), r.namespace, r.name)
        for r in (ref_of(m) for m in c.tenant_flow_control(spec))
    ]


def tenant_audit_acknowledged(
    *,
    actor: Actor,
    environment: Environment,
    backend: DeliveryBackend,
    spec: c.EnvironmentSpec,
    refs: list[AppliedRef],
) -> bool:
    """True once the tenant API server's events for teardown's own deletions are archived (or
    there is nothing to wait for); False while waiting (see the module docstring)."""
    env = environment
    control_plane = control_plane_of(refs)
    if control_plane is None or not sink_token_issued(environment=env):
        detail = "no tenant API server holds a sink token: nothing to wait for"
        step_done(actor=actor, environment=env, name=ACK_STEP, detail=detail)
        return True
    step_started(environment=env, name=ACK_STEP)
    since = step_detail(environment=env, name=ACK_STEP)
    if not since.startswith("since:"):
        tenant = backend.tenant(namespace=control_plane.namespace, name=control_plane.name)
        if tenant is None:
            detail = "the tenant API server does not serve: it has no request to acknowledge"
            step_done(actor=actor, environment=env, name=ACK_STEP, detail=detail)
            return True
        for manifest in reversed(c.tenant_flow_control(spec)):
            tenant.delete(ref_of(manifest))  # a retry deletes again: a 404 is audited too
        since = f"since:{timezone.now().isoformat()}"
        ProvisioningStep.objects.filter(environment=env, name=ACK_STEP).update(detail=since)
    wanted = _wanted(spec)
    missing = deletions_unacknowledged(environment=env, objects=wanted)
    if not missing:
        detail = f"{len(wanted)} deletions acknowledged by the tenant API server"
        step_done(actor=actor, environment=env, name=ACK_STEP, detail=detail)
        return True
    waited = (timezone.now() - datetime.fromisoformat(since.removeprefix("since:"))).total_seconds()
    if waited < conf.tenant_audit_ack_timeout():
        return False
    with transaction.atomic():
        audit.record(
            actor,
            "portal.environment.tenant_audit_incomplete",
            audit_target(env),
            {
                "waited_seconds": round(waited, 1),
                "unacknowledged": [f"{r} {n or '-'}/{m}" for r, n, m in missing],
            },
        )
        step_done(
            actor=actor,
            environment=env,
            name=ACK_STEP,
            detail=f"timed out: {len(missing)} deletions unacknowledged, evidence may be incomplete",
        )
    return True
