"""The delete path: cordon, delete workloads, drain and remove the environment's own nodes, wait
for finalizers with a deadline, confirm the audit event is in the chain, then delete the control
plane and namespace. On timeout: QUARANTINED, owned by a person, resources left labelled and
attributable.

Teardown is a pipeline of steps (`TEARDOWN`, data) run by the one driver
(portal/services/pipeline.py), which resumes at the first unfinished step after a crash.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from prometheus_client import Counter

import audit
from audit.models import ChainEvent
from kiln.cluster import AppliedRef, ref_of
from kiln.cluster.backends import get_backend as _get_backend
from kiln.cluster.nodes import is_daemon_pod, name_of, node_list, pod_list, pod_node
from kiln.errors import Forbidden, IllegalTransition
from kiln.identity.permissions import Actor, can_act_on_environment
from portal import compose as c
from portal import conf
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep
from portal.services.lifecycle import audit_target, environment_transition
from portal.services.pipeline import pipeline_advance
from portal.services.pipeline_data import Move, Pipeline, Result, Run, Step, done, failed, pending
from portal.services.provisioning import environment_spec
from portal.services.queueing import enqueue_teardown
from portal.services.steps import TEARDOWN_STEPS, step_detail
from portal.services.tenant_cluster import (
    ACK_STEP,
    tenant_audit_acknowledged,
    tenant_audit_unawaited,
)

REAPER = "reaper"
DELETED, PENDING, QUARANTINED, NOOP = "deleted", "pending", "quarantined", "noop"
QUARANTINES = Counter(
    "kiln_portal_quarantines_total",
    "Teardowns that ran out of their deadline and were quarantined, by environment class",
    ["env_class"],
)


def environment_teardown_request(
    *, actor: Actor, environment: Environment, reason: str = ""
) -> Environment:
    """Ask for teardown: READY or SLEEPING -> EXPIRING; FAILED or QUARANTINED -> TEARING_DOWN (a
    fresh deadline)."""
    if not can_act_on_environment(actor, environment.team.slug):
        raise Forbidden("only engineers of the owning team may tear this environment down")
    reason = reason or "teardown requested"
    status = Status(environment.status)
    with transaction.atomic():
        if status in (Status.READY, Status.SLEEPING):
            environment_transition(
                actor=actor, environment=environment, to=Status.EXPIRING, reason=reason
            )
        elif status in (Status.FAILED, Status.QUARANTINED):
            reset_teardown_steps(environment)
            environment_transition(
                actor=actor,
                environment=environment,
                to=Status.TEARING_DOWN,
                reason=reason,
                updates={
                    "teardown_deadline": teardown_deadline_from_now(),
                    "quarantine_owner": None,
                },
            )
        elif status in (Status.EXPIRING, Status.TEARING_DOWN):
            # Already on its way: no transition. Its teardown is queued again, though (the task
            # checks the state first, so a second one changes nothing): a DELETE is retried
            # because its answer failed, and when that was the broker, down as the first
            # teardown task was sent, the retry is what gets it going again before the
            # reaper's next pass.
            enqueue_teardown(environment=environment)
            return environment
        else:
            raise IllegalTransition(
                f"an environment in {status} cannot be torn down",
                extra={"from": status.value, "environment": environment.public_id},
            )
        enqueue_teardown(environment=environment)
    return environment


def teardown_deadline_from_now():
    """A fresh teardown deadline."""
    return timezone.now() + timedelta(seconds=conf.teardown_deadline())


def reset_teardown_steps(env: Environment) -> None:
    """Make a retried teardown run its unfinished steps again."""
    ProvisioningStep.objects.filter(environment=env, name__in=TEARDOWN_STEPS).exclude(
        status=ProvisioningStep.DONE
    ).update(status=ProvisioningStep.PENDING)


def _quarantine_owner(env: Environment):
    User = get_user_model()
    username = conf.quarantine_owner()
    if username:
        owner = User.objects.filter(username=username).first()
        if owner is not None:
            return owner
    return env.request.requested_by


def _quarantined(run: Run, result: Result) -> Result:
    """QUARANTINED, owned by a person, with what is left behind."""
    env = run.environment
    owner = _quarantine_owner(env)

    def count() -> None:  # once the move is committed: a rolled-back quarantine did not happen
        transaction.on_commit(lambda: QUARANTINES.labels(env.env_class).inc())

    return failed(
        result.reason,
        to=Status.QUARANTINED,
        updates={"quarantine_owner": owner},
        data={"owner": owner.get_username(), "remaining": list(result.remaining)},
        record=count,
        failed_step="",  # the stuck step stays as it was, to be retried
    )


def _waiting(run: Run, step: Step, result: Result) -> Result:
    """Something teardown waits for is still there: wait while the deadline holds, QUARANTINED
    once it has passed (a step with its own deadline just waits)."""
    deadline = run.environment.teardown_deadline
    if result.bounded and deadline is not None and timezone.now() > deadline:
        return _quarantined(run, result)
    return result


def _audit_event_chained(event_id: str) -> bool:
    """True once the audit writer has put the event in the hash chain."""
    return ChainEvent.objects.filter(event_id=event_id).exists()


def environment_teardown(*, environment_id: int) -> str:
    """Advance teardown as far as it can go now: DELETED, PENDING, QUARANTINED or NOOP."""
    return pipeline_advance(TEARDOWN, environment_id=environment_id)


def _refs(run: Run) -> list[AppliedRef]:
    """What Kiln applied: the recorded references, or the composed manifests when the apply
    died before recording them (a partial apply is cleaned up whole)."""

    def read() -> list[AppliedRef]:
        env = run.environment
        if env.applied_refs:
            return [AppliedRef.from_dict(r) for r in env.applied_refs]
        return [ref_of(m) for m in env.manifests]

    return run.once("refs", read)


def _workloads(run: Run) -> list[AppliedRef]:
    """The environment's workload objects and those running in its namespace, listed once a
    pass and only when a step still needs them."""

    def read() -> list[AppliedRef]:
        found = [r for r in _refs(run) if r.kind in c.WORKLOAD_KINDS]
        running = run.backend.list_kinds(c.WORKLOAD_RESOURCES, run.environment.namespace)
        return found + [ref_of(obj) for obj in running]

    return run.once("workloads", read)


def _cordon(run: Run) -> Result:
    """NodePool limits and pod quota to zero, on the objects still alive."""
    backend = run.backend
    live = [m for m in c.cordon(run.environment.manifests) if _exists_alive(backend, ref_of(m))]
    backend.apply(live)
    return done(f"{len(live)} object{'' if len(live) == 1 else 's'} cordoned")


def _delete_workloads(run: Run) -> Result:
    """Delete the workloads, in the reverse of the order they were applied in."""
    for ref in reversed(_workloads(run)):
        run.backend.delete(ref)
    return done(f"{len(_workloads(run))} deletions requested")


def _drain_nodes(run: Run) -> Result:
    """Drain and remove the nodes the environment's own NodePool launched: evict every pod bound
    to one (DaemonSets' go with the node), then delete it, so its capacity goes with the
    environment instead of waiting for Karpenter to notice the pool is gone. Audited once."""
    backend, env = run.backend, run.environment
    nodes = node_list(backend, environment=env.namespace)
    if not nodes:
        return done("no nodes of its own")
    names = {name_of(n) for n in nodes}
    evicted = [
        ref_of(p) for p in pod_list(backend) if pod_node(p) in names and not is_daemon_pod(p)
    ]
    for ref in evicted:
        backend.delete(ref)
    for name in sorted(names):
        backend.delete(AppliedRef("v1", "Node", "", name))
    with transaction.atomic():
        audit.record(
            run.actor,
            "portal.environment.nodes_drained",
            audit_target(env),
            {
                "namespace": env.namespace,
                "nodes": sorted(names),
                "evicted": sorted(f"{r.namespace}/{r.name}" for r in evicted),
            },
        )
    return done(f"{len(names)} nodes drained and removed ({len(evicted)} pods evicted)")


def _finalizers_cleared(run: Run) -> Result:
    """Wait until no workload remains, nor a node its NodePool launched (drained and removed by
    Karpenter once the pool is gone)."""
    backend, env = run.backend, run.environment
    remaining = [str(r) for r in _workloads(run) if backend.get(*r.key) is not None]
    remaining += [
        f"v1 Node {name_of(n)}"
        for n in node_list(backend, environment=env.namespace, include_deleting=True)
    ]
    if remaining:
        return pending(
            f"finalizers did not clear by the deadline: {', '.join(remaining)}",
            remaining=tuple(remaining),
        )
    return done("no workloads remain")


def _tenant_audit_unawaited(run: Run) -> Result | None:
    return tenant_audit_unawaited(environment=run.environment, refs=_refs(run))


def _tenant_audit_acknowledged(run: Run) -> Result:
    env = run.environment
    return tenant_audit_acknowledged(
        actor=run.actor,
        environment=env,
        backend=run.backend,
        spec=environment_spec(environment=env),
        refs=_refs(run),
    )


def _audit_confirmed(run: Run) -> Result:
    """Write `portal.environment.workloads_removed` once (its id kept in the step's row) and wait
    until the audit writer has put it in the chain."""
    env = run.environment
    event_id = step_detail(environment=env, name="audit-confirmed")
    if not event_id.startswith("event:"):
        workloads = [str(r) for r in _workloads(run)]  # may ask the cluster: before the transaction
        with transaction.atomic():
            recorded = audit.record(
                run.actor,
                "portal.environment.workloads_removed",
                audit_target(env),
                {"namespace": env.namespace, "workloads": workloads},
            )
            ProvisioningStep.objects.filter(environment=env, name="audit-confirmed").update(
                detail=f"event:{recorded}"
            )
        event_id = f"event:{recorded}"
    if not _audit_event_chained(event_id.removeprefix("event:")):
        return pending("the teardown audit event was not confirmed in the chain by the deadline")
    return done(event_id)


def _delete_namespace(run: Run) -> Result:
    """Delete the control plane and the namespace, again the reverse of their apply order: the
    control plane's flow control after the control plane, the namespace (applied first) last."""
    backend = run.backend
    last = [
        r for r in reversed(_refs(run)) if r.kind in c.CONTROL_PLANE_KINDS or r.kind == "Namespace"
    ]
    for ref in last:
        backend.delete(ref)
    remaining = [str(r) for r in last if backend.get(*r.key) is not None]
    if remaining:
        return pending(
            "namespace or control plane did not go by the deadline: " + ", ".join(remaining),
            remaining=tuple(remaining),
        )
    return done("control plane and namespace deleted")


def _exists_alive(backend, ref: AppliedRef) -> bool:
    obj = backend.get(*ref.key)
    return obj is not None and not obj.get("metadata", {}).get("deletionTimestamp")


TEARDOWN = Pipeline(
    name="teardown",
    span="portal.environment.teardown",
    actor=REAPER,
    steps=(
        Step("cordon", _cordon),
        Step("delete-workloads", _delete_workloads),
        Step("drain-nodes", _drain_nodes),
        Step("finalizers-cleared", _finalizers_cleared),
        Step(ACK_STEP, _tenant_audit_acknowledged, guard=_tenant_audit_unawaited),
        Step("audit-confirmed", _audit_confirmed),
        Step("delete-namespace", _delete_namespace),
    ),
    enters_from=Status.EXPIRING,
    runs_in=Status.TEARING_DOWN,
    ends_in=Status.DELETED,
    entry=lambda run: Move(
        "teardown started", updates={"teardown_deadline": teardown_deadline_from_now()}
    ),
    end=lambda run: Move("every resource is gone", updates={"deleted_at": timezone.now()}),
    backend=lambda: _get_backend(),  # looked up when a pass needs it (tests replace it)
    waiting=_waiting,
)
