"""The delete path: cordon, delete workloads, wait for finalizers with a deadline, confirm the audit
event is in the chain, then delete the control plane and namespace. On timeout: QUARANTINED,
owned by a person, resources left labelled and attributable.
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
from kiln.cluster.nodes import name_of, node_list
from kiln.errors import Forbidden, IllegalTransition, InvalidInput
from kiln.identity.permissions import Actor, can_act_on_environment, system_actor
from kiln.observability import tracer
from portal import compose as c
from portal import conf
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep
from portal.services.lifecycle import audit_target, environment_transition
from portal.services.provisioning import environment_spec
from portal.services.queueing import enqueue_teardown
from portal.services.steps import TEARDOWN_STEPS, step_detail, step_done, step_started
from portal.services.tenant_cluster import ACK_STEP, tenant_audit_acknowledged

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
    """Ask for teardown: READY -> EXPIRING; FAILED or QUARANTINED -> TEARING_DOWN (a fresh deadline)."""
    if not can_act_on_environment(actor, environment.team.slug):
        raise Forbidden("only engineers of the owning team may tear this environment down")
    reason = reason or "teardown requested"
    status = Status(environment.status)
    with transaction.atomic():
        if status == Status.READY:
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


def environment_extend(*, actor: Actor, environment: Environment, hours: int) -> Environment:
    """Push a READY environment's expiry out by `hours`, within its class's maximum lifetime."""
    if not can_act_on_environment(actor, environment.team.slug):
        raise Forbidden("only engineers of the owning team may extend this environment")
    if not isinstance(hours, int) or isinstance(hours, bool) or hours < 1:
        raise InvalidInput(
            "The request is invalid.",
            extra={"fields": {"hours": ["A whole number of hours, at least 1."]}},
        )
    with transaction.atomic():
        env = Environment.objects.select_for_update().get(pk=environment.pk)
        if env.status != Status.READY:
            raise IllegalTransition(
                f"only a READY environment can be extended (this one is {env.status})",
                extra={"from": env.status, "environment": env.public_id},
            )
        limit = conf.MAX_TTL_HOURS[env.env_class]
        new_expiry = env.expires_at + timedelta(hours=hours)
        lifetime = (new_expiry - (env.ready_at or env.created_at)).total_seconds() / 3600
        if lifetime > limit:
            raise InvalidInput(
                "The request is invalid.",
                extra={
                    "fields": {
                        "hours": [f"{env.env_class} environments live at most {limit}h in total."]
                    }
                },
            )
        previous = env.expires_at
        env.expires_at = new_expiry
        env.last_activity_at, env.idle_proposed_at = timezone.now(), None  # an owner's activity
        env.save(update_fields=["expires_at", "last_activity_at", "idle_proposed_at", "updated_at"])
        audit.record(
            actor,
            "portal.environment.extended",
            audit_target(env),
            {"hours": hours, "from": previous, "to": new_expiry},
        )
    environment.refresh_from_db()
    return environment


def teardown_deadline_from_now():
    """A fresh teardown deadline."""
    return timezone.now() + timedelta(seconds=conf.teardown_deadline())


def reset_teardown_steps(env: Environment) -> None:
    """Make a retried teardown run its unfinished steps again."""
    ProvisioningStep.objects.filter(environment=env, name__in=TEARDOWN_STEPS).exclude(
        status=ProvisioningStep.DONE
    ).update(status=ProvisioningStep.PENDING)


def _refs(env: Environment) -> list[AppliedRef]:
    if env.applied_refs:
        return [AppliedRef.from_dict(r) for r in env.applied_refs]
    return [ref_of(m) for m in env.manifests]


def _quarantine_owner(env: Environment):
    User = get_user_model()
    username = conf.quarantine_owner()
    if username:
        owner = User.objects.filter(username=username).first()
        if owner is not None:
            return owner
    return env.request.requested_by


def _quarantine(*, env: Environment, reason: str, remaining: list[str]) -> str:
    """QUARANTINED, owned by a person, with what is left behind."""
    owner = _quarantine_owner(env)
    environment_transition(
        actor=system_actor(REAPER),
        environment=env,
        to=Status.QUARANTINED,
        reason=reason,
        updates={"quarantine_owner": owner},
        data={"owner": owner.get_username(), "remaining": remaining},
    )
    # Counted once the transition is committed: a rolled-back quarantine did not happen.
    transaction.on_commit(lambda: QUARANTINES.labels(env.env_class).inc())
    return QUARANTINED


def _past_deadline(env: Environment) -> bool:
    return env.teardown_deadline is not None and timezone.now() > env.teardown_deadline


def _waiting(*, env: Environment, reason: str, remaining: list[str]) -> str:
    """Something teardown waits for is still there: PENDING (check again later) while the
    deadline holds, QUARANTINED with `reason` once it has passed."""
    if _past_deadline(env):
        return _quarantine(env=env, reason=reason, remaining=remaining)
    return PENDING


def _audit_event_chained(event_id: str) -> bool:
    """True once the audit writer has put the event in the hash chain."""
    return ChainEvent.objects.filter(event_id=event_id).exists()


def environment_teardown(*, environment_id: int) -> str:
    """Advance teardown as far as it can go now: DELETED, PENDING, QUARANTINED or NOOP."""
    actor = system_actor(REAPER)
    env = Environment.objects.select_related("team", "request__requested_by").get(pk=environment_id)
    with tracer("kiln.portal").start_as_current_span("portal.environment.teardown") as span:
        span.set_attribute("kiln.environment", env.public_id)
        if env.status == Status.EXPIRING:
            with transaction.atomic():
                locked = Environment.objects.select_for_update().get(pk=env.pk)
                if locked.status == Status.EXPIRING:
                    environment_transition(
                        actor=actor,
                        environment=env,
                        to=Status.TEARING_DOWN,
                        reason="teardown started",
                        updates={"teardown_deadline": teardown_deadline_from_now()},
                    )
            env.refresh_from_db()
        if env.status != Status.TEARING_DOWN:
            return NOOP
        backend = _get_backend()
        refs = _refs(env)
        # Read once a pass (each step is checked once, before it is done): a poll waiting for the
        # chain reads one row set, not one query per step and the namespace's workloads again.
        done = set(
            ProvisioningStep.objects.filter(
                environment=env, name__in=TEARDOWN_STEPS, status=ProvisioningStep.DONE
            ).values_list("name", flat=True)
        )
        listed: dict[str, list[AppliedRef]] = {}

        def workloads() -> list[AppliedRef]:
            """The environment's workload objects and those running in its namespace, listed
            once a pass and only when a step still needs them."""
            if "refs" not in listed:
                found = [r for r in refs if r.kind in c.WORKLOAD_KINDS]
                running = backend.list_kinds(c.WORKLOAD_RESOURCES, env.namespace)
                listed["refs"] = found + [ref_of(obj) for obj in running]
            return listed["refs"]

        if "cordon" not in done:
            step_started(environment=env, name="cordon")
            live = [m for m in c.cordon(env.manifests) if _exists_alive(backend, ref_of(m))]
            backend.apply(live)
            step_done(
                actor=actor,
                environment=env,
                name="cordon",
                detail=f"{len(live)} objects cordoned",
            )

        if "delete-workloads" not in done:
            step_started(environment=env, name="delete-workloads")
            for ref in reversed(workloads()):  # the reverse of the order they were applied in
                backend.delete(ref)
            step_done(
                actor=actor,
                environment=env,
                name="delete-workloads",
                detail=f"{len(workloads())} deletions requested",
            )

        if "finalizers-cleared" not in done:
            step_started(environment=env, name="finalizers-cleared")
            remaining = [str(r) for r in workloads() if backend.get(*r.key) is not None]
            # The nodes its NodePool launched: drained and removed by Karpenter once the pool is gone.
            remaining += [
                f"v1 Node {name_of(n)}"
                for n in node_list(backend, environment=env.namespace, include_deleting=True)
            ]
            if remaining:
                return _waiting(
                    env=env,
                    reason=f"finalizers did not clear by the deadline: {', '.join(remaining)}",
                    remaining=remaining,
                )
            step_done(
                actor=actor,
                environment=env,
                name="finalizers-cleared",
                detail="no workloads remain",
            )

        if ACK_STEP not in done and not tenant_audit_acknowledged(
            actor=actor,
            environment=env,
            backend=backend,
            spec=environment_spec(environment=env),
            refs=refs,
        ):
            return PENDING

        if "audit-confirmed" not in done:
            step_started(environment=env, name="audit-confirmed")
            event_id = step_detail(environment=env, name="audit-confirmed")
            if not event_id.startswith("event:"):
                with transaction.atomic():
                    recorded = audit.record(
                        actor,
                        "portal.environment.workloads_removed",
                        audit_target(env),
                        {"namespace": env.namespace, "workloads": [str(r) for r in workloads()]},
                    )
                    ProvisioningStep.objects.filter(environment=env, name="audit-confirmed").update(
                        detail=f"event:{recorded}"
                    )
                event_id = f"event:{recorded}"
            if not _audit_event_chained(event_id.removeprefix("event:")):
                return _waiting(
                    env=env,
                    reason="the teardown audit event was not confirmed in the chain by the deadline",
                    remaining=[],
                )
            step_done(
                actor=actor,
                environment=env,
                name="audit-confirmed",
                detail=event_id,
            )

        if "delete-namespace" not in done:
            step_started(environment=env, name="delete-namespace")
            # The reverse of the order they were applied in: the control plane's flow control
            # after the control plane, the namespace (applied first) last.
            last = [
                r
                for r in reversed(refs)
                if r.kind in c.CONTROL_PLANE_KINDS or r.kind == "Namespace"
            ]
            for ref in last:
                backend.delete(ref)
            remaining = [str(r) for r in last if backend.get(*r.key) is not None]
            if remaining:
                return _waiting(
                    env=env,
                    reason="namespace or control plane did not go by the deadline: "
                    + ", ".join(remaining),
                    remaining=remaining,
                )
            with transaction.atomic():
                step_done(
                    actor=actor,
                    environment=env,
                    name="delete-namespace",
                    detail="control plane and namespace deleted",
                )
                environment_transition(
                    actor=actor,
                    environment=env,
                    to=Status.DELETED,
                    reason="every resource is gone",
                    updates={"deleted_at": timezone.now()},
                )
            return DELETED
        return NOOP


def _exists_alive(backend, ref: AppliedRef) -> bool:
    obj = backend.get(*ref.key)
    return obj is not None and not obj.get("metadata", {}).get("deletionTimestamp")
