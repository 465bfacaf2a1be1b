"""What Kiln writes for a tenant control plane outside the GitOps plan, through the cluster
interface, and how teardown waits for the tenant's audit trail.

Each is the work of one step of a pipeline (portal/services/provisioning.py, teardown.py),
returning its outcome; the driver records it.

- `tenant-audit-token` (provisioning, after apply): a fresh sink token is written to the
  Secret the TenantControlPlane mounts for its audit webhook (`backend.write_secret`: straight
  to the cluster, never into the plan or Git) and only then its hash is stored (with the
  step's record), so a worker killed in between leaves a token nobody accepts, replaced on
  the retry.
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
from typing import Any

from django.utils import timezone

import audit
from kiln.cluster import AppliedRef, DeliveryBackend, ref_of
from kiln.identity.permissions import Actor
from portal import compose as c
from portal import conf
from portal.models import Environment, ProvisioningStep
from portal.services.lifecycle import audit_target
from portal.services.pipeline_data import Result, done, pending
from portal.services.steps import step_detail
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


def tenant_control_plane_ref(*, environment: Environment) -> AppliedRef | None:
    """The TenantControlPlane among the environment's composed manifests, or None."""
    return control_plane_of([ref_of(m) for m in environment.manifests])


def tenant_namespace_exists(*, backend: DeliveryBackend, environment: Environment) -> bool:
    """Whether the environment's namespace is in the cluster (behind Argo CD, not before its sync)."""
    return backend.get("v1", "Namespace", None, environment.namespace) is not None


def tenant_api_server(*, backend: DeliveryBackend, environment: Environment) -> Any:
    """A client of the tenant's own API server, or None while it does not serve."""
    control_plane = tenant_control_plane_ref(environment=environment)
    return backend.tenant(namespace=control_plane.namespace, name=control_plane.name)


def tenant_audit_token_deliver(
    *, environment: Environment, backend: DeliveryBackend, spec: c.EnvironmentSpec
) -> Result:
    """Write a fresh sink token into the Secret the tenant API server mounts; its hash is kept
    with the step's record, after the write (see the module docstring)."""
    token, name = new_sink_token(), c.audit_token_secret_name(spec)
    backend.write_secret(
        namespace=spec.namespace, name=name, data={c.TOKEN_KEY: token}, labels=c.labels(spec)
    )
    return done(
        f"sink token written to Secret {spec.namespace}/{name} (not committed)",
        data={"secret": f"{spec.namespace}/{name}"},
        record=lambda: tenant_audit_token_store(environment=environment, token=token),
    )


def tenant_flow_control_seed(*, tenant: Any, spec: c.EnvironmentSpec) -> Result:
    """Apply the flow-control objects inside the tenant's API server (`tenant`, serving)."""
    refs = tenant.apply(c.tenant_flow_control(spec))
    return done(
        f"{len(refs)} objects applied in the tenant API server",
        data={"objects": [str(r) for r in refs]},
    )


def _wanted(spec: c.EnvironmentSpec) -> list[tuple[str, str, str]]:
    """The (resource, namespace, name) of what teardown deletes through the tenant API server."""
    return [
        (resource_of(r.kind), r.namespace, r.name)
        for r in (ref_of(m) for m in c.tenant_flow_control(spec))
    ]


def tenant_audit_unawaited(*, environment: Environment, refs: list[AppliedRef]) -> Result | None:
    """Done at once when no tenant API server holds a sink token: nothing to wait for."""
    if control_plane_of(refs) is None or not sink_token_issued(environment=environment):
        return done("no tenant API server holds a sink token: nothing to wait for")
    return None


def tenant_audit_acknowledged(
    *,
    actor: Actor,
    environment: Environment,
    backend: DeliveryBackend,
    spec: c.EnvironmentSpec,
    refs: list[AppliedRef],
) -> Result:
    """Done once the tenant API server's events for teardown's own deletions are archived;
    pending while waiting, with its own deadline (see the module docstring)."""
    env = environment
    since = step_detail(environment=env, name=ACK_STEP)
    if not since.startswith("since:"):
        control_plane = control_plane_of(refs)
        tenant = backend.tenant(namespace=control_plane.namespace, name=control_plane.name)
        if tenant is None:
            return done("the tenant API server does not serve: it has no request to acknowledge")
        for manifest in reversed(c.tenant_flow_control(spec)):
            tenant.delete(ref_of(manifest))  # a retry deletes again: a 404 is audited too
        since = f"since:{timezone.now().isoformat()}"
        ProvisioningStep.objects.filter(environment=env, name=ACK_STEP).update(detail=since)
    wanted = _wanted(spec)
    missing = deletions_unacknowledged(environment=env, objects=wanted)
    if not missing:
        return done(f"{len(wanted)} deletions acknowledged by the tenant API server")
    waited = (timezone.now() - datetime.fromisoformat(since.removeprefix("since:"))).total_seconds()
    if waited < conf.tenant_audit_ack_timeout():
        return pending("the tenant API server's delete events are not archived yet", bounded=False)

    def incomplete() -> None:
        audit.record(
            actor,
            "portal.environment.tenant_audit_incomplete",
            audit_target(env),
            {
                "waited_seconds": round(waited, 1),
                "unacknowledged": [f"{r} {n or '-'}/{m}" for r, n, m in missing],
            },
        )

    return done(
        f"timed out: {len(missing)} deletions unacknowledged, evidence may be incomplete",
        record=incomplete,
    )
