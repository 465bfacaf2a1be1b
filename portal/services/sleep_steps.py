"""Sleeping and waking as pipelines of steps (data), run by the one driver (pipeline.py).

Sleeping (SLEEPING, settling as `portal.environment.asleep`):

1. `sleep-remember`: the replicas of each Deployment and StatefulSet in the namespace that runs
   any, kept on the environment (`sleep_memory`) and committed before anything is scaled, so a
   crash after the first scale still knows what each had;
2. `sleep-workloads`: each remembered workload to zero through its scale subresource;
3. `sleep-capacity`: the tenant control plane to zero replicas and the NodePool's limits to
   zero (`portal.compose.sleep.asleep`); Karpenter removes the emptied nodes.

Waking (WAKING -> READY):

1. `wake-capacity`: the control plane and NodePool as composed (`awake`);
2. `wake-workloads`: each remembered workload back to its replicas (one gone since is named);
3. `wake-ready`: every restored object reports healthy and, on the simulated cluster, the
   restored workloads' pods run on nodes (as many Running as their replicas: a pool woken from
   zero launches its nodes first); past KILN_WAKE_TIMEOUT_SECONDS from the request, FAILED.

Every step is idempotent (a scale to the same count, a server-side apply), and the driver skips
the done ones, so a pass after a crash resumes where the last one stopped. Volumes, Secrets and
the database claim are never touched.
"""

from __future__ import annotations

from django.utils import timezone

from kiln.cluster import AppliedRef, HealthStatus, ref_of
from kiln.cluster.backends import get_backend
from kiln.cluster.base import is_deleting
from kiln.cluster.nodes import RUNNING, pod_node, pod_owner, pod_phase
from portal import conf, uptime
from portal.compose.sleep import SCALED_RESOURCES, asleep, awake
from portal.lifecycle import Status
from portal.models import Environment
from portal.services.pipeline_data import Move, Pipeline, Result, Run, Step, done, failed, pending
from portal.services.steps import SLEEP_STEPS, WAKE_STEPS

SLEEPER = "sleeper"


def remembered(environment: Environment) -> list[tuple[AppliedRef, int]]:
    """The workloads sleeping scaled to zero, with the replicas each had."""
    return [
        (AppliedRef(w["apiVersion"], w["kind"], environment.namespace, w["name"]), w["replicas"])
        for w in (environment.sleep_memory or {}).get("workloads", [])
    ]


def _replicas(obj: dict) -> int:
    value = (obj.get("spec") or {}).get("replicas", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _remember(run: Run) -> Result:
    """What runs now: each workload with replicas, read once and kept with the step's record."""
    env = run.environment
    objects = run.backend.list_kinds(SCALED_RESOURCES, env.namespace)
    workloads = [
        {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": ref_of(o).name, "replicas": n}
        for o in objects
        if not is_deleting(o) and (n := _replicas(o)) > 0
    ]
    memory = {"workloads": workloads}
    env.sleep_memory = memory

    def keep() -> None:
        Environment.objects.filter(pk=env.pk).update(sleep_memory=memory)

    return done(
        f"{len(workloads)} workloads remembered",
        data={"workloads": {f"{w['kind']}/{w['name']}": w["replicas"] for w in workloads}},
        record=keep,
    )


def _sleep_workloads(run: Run) -> Result:
    """Each remembered workload to zero replicas (one gone since is passed over)."""
    scaled = [
        ref for ref, _ in remembered(run.environment) if run.backend.scale(ref, 0) is not None
    ]
    return done(f"{len(scaled)} workloads scaled to zero")


def _has_capacity(run: Run) -> bool:
    return bool(asleep(run.environment.manifests))


def _apply_alive(run: Run, manifests: list[dict]) -> list[dict]:
    """Apply those of `manifests` whose object is still in the cluster and not going (one
    deleted meanwhile is not brought back); -> what was applied."""
    alive = []
    for manifest in manifests:
        obj = run.backend.get(*ref_of(manifest).key)
        if obj is not None and not is_deleting(obj):
            alive.append(manifest)
    run.backend.apply(alive)
    return alive


def _sleep_capacity(run: Run) -> Result:
    """The control plane to zero replicas, the NodePool's limits to zero."""
    applied = _apply_alive(run, asleep(run.environment.manifests))
    return done(f"{len(applied)} objects at zero", data={"kinds": [m["kind"] for m in applied]})


def _wake_capacity(run: Run) -> Result:
    """The control plane and the NodePool as composed."""
    return done(f"{len(_apply_alive(run, awake(run.environment.manifests)))} objects as composed")


def _wake_workloads(run: Run) -> Result:
    """Each remembered workload back to the replicas it had; one deleted meanwhile is named."""
    restored, gone = {}, []
    for ref, replicas in remembered(run.environment):
        if run.backend.scale(ref, replicas) is None:
            gone.append(f"{ref.kind}/{ref.name}")
        else:
            restored[f"{ref.kind}/{ref.name}"] = replicas
    return done(
        f"{len(restored)} workloads restored"
        + (f"; gone meanwhile: {', '.join(gone)}" if gone else ""),
        data={"restored": restored, "gone": gone},
    )


def _woken_refs(run: Run) -> list[AppliedRef]:
    refs = [ref_of(m) for m in awake(run.environment.manifests)]
    return refs + [ref for ref, _ in remembered(run.environment)]


def _wake_ready(run: Run) -> Result:
    """Done once every restored object reports healthy (one gone meanwhile is not waited for)."""
    refs = _woken_refs(run)
    healths = run.backend.health_many(refs)
    degraded = [
        f"{r.kind} {r.name}: {h.message}"
        for r, h in zip(refs, healths, strict=True)
        if h.status in (HealthStatus.DEGRADED, HealthStatus.DELETING)
    ]
    if degraded:
        return failed("waking failed: " + "; ".join(degraded))
    waiting = tuple(
        f"{r.kind} {r.name}"
        for r, h in zip(refs, healths, strict=True)
        if h.status not in (HealthStatus.HEALTHY, HealthStatus.MISSING)
    )
    if waiting:
        return pending("not serving yet", remaining=waiting)
    wanted, running = _pods_serving(run)
    if running < wanted:
        # A pool woken from zero launches nodes first: the wake ends when the pods run on them.
        return pending(
            "not serving yet", remaining=(f"{running} of {wanted} workload pods running",)
        )
    return done(
        f"{len(refs)} objects serving" + (f", {running} workload pods running" if wanted else ""),
        data={"pods_running": running},
    )


def _pods_serving(run: Run) -> tuple[int, int]:
    """(replicas the remembered workloads still in the cluster ask for, their pods Running on a
    node) where Kiln runs the cluster's scheduling (the simulated cluster), whose workload
    conditions are not its pods'; (0, 0) elsewhere, where a Deployment is Available only once
    its pods are. A workload deleted meanwhile is not waited for."""
    if not run.backend.simulates_scheduling:
        return 0, 0
    namespace = run.environment.namespace
    present = {
        (o["kind"], ref_of(o).name)
        for o in run.backend.list_kinds(SCALED_RESOURCES, namespace)
        if not is_deleting(o)
    }
    wanted = sum(n for ref, n in remembered(run.environment) if (ref.kind, ref.name) in present)
    if not wanted:
        return 0, 0
    # A Deployment's pods are its ReplicaSets'; a StatefulSet's its own.
    owner_of = {
        ("ReplicaSet", ref_of(rs).name): pod_owner(rs)
        for rs in run.backend.list("apps/v1", "ReplicaSet", namespace, include_deleting=False)
    }
    running = 0
    for pod in run.backend.list("v1", "Pod", namespace, include_deleting=False):
        owner = pod_owner(pod)
        if pod_phase(pod) == RUNNING and pod_node(pod) and owner_of.get(owner, owner) in present:
            running += 1
    return wanted, min(running, wanted)


def _wake_waiting(run: Run, step: Step, result: Result) -> Result:
    """A wait fails once KILN_WAKE_TIMEOUT_SECONDS have passed since the wake was asked for."""
    since = run.environment.wake_requested_at or run.environment.updated_at
    if (timezone.now() - since).total_seconds() > conf.wake_timeout():
        return failed(
            f"not awake within {conf.wake_timeout():.0f}s: {', '.join(result.remaining)}",
            failed_step=WAKE_STEPS[2],
        )
    return result


def _asleep(run: Run) -> Move:
    env, now = run.environment, timezone.now()
    # Read now, not when the pass began: a wake and a sleep since then each changed the list.
    sleeps = Environment.objects.filter(pk=env.pk).values_list("sleeps", flat=True).first() or []
    return Move(
        "asleep: workloads, control plane and nodes at zero; volumes and database kept",
        updates={"slept_at": now, "sleeps": uptime.asleep_from(sleeps, now)},
        data={"trigger": env.sleep_trigger, "workloads": len(remembered(env))},
    )


def _awake(run: Run) -> Move:
    env, now = run.environment, timezone.now()
    seconds = round((now - (env.wake_requested_at or now)).total_seconds(), 3)
    return Move(
        "awake: every workload at its replicas again",
        updates={
            "slept_at": None,
            "woke_at": now,
            "last_wake_seconds": seconds,
            "sleeps": uptime.awake_from(env.sleeps, now),
        },
        data={"seconds_to_wake": seconds, "workloads": len(remembered(env))},
    )


def _not_entered_here(run: Run) -> Move:
    """Sleep and wake are entered by the service a person or a trigger calls, never by a pass."""
    raise RuntimeError(f"{run.pipeline.name} is entered by its service, not by a pass")


def _round(
    name: str, states: tuple[Status, Status, Status], steps: tuple[Step, ...], **options
) -> Pipeline:
    """A sleep or a wake: entered by its service, run by the sleeper on the configured backend
    from `states` (enters from, runs in, ends in), its step rows afresh each time it is entered."""
    return Pipeline(
        name,
        f"portal.environment.{name}",  # its span
        SLEEPER,
        steps,
        *states,
        entry=_not_entered_here,
        backend=lambda: get_backend(),  # looked up when a pass needs it (tests replace it)
        repeats=True,
        **options,
    )


_SLEEPING = (
    Step(SLEEP_STEPS[0], _remember, starts=False),
    Step(SLEEP_STEPS[1], _sleep_workloads),
    Step(SLEEP_STEPS[2], _sleep_capacity, when=_has_capacity),
)
_WAKING = (
    Step(WAKE_STEPS[0], _wake_capacity, when=_has_capacity),
    Step(WAKE_STEPS[1], _wake_workloads),
    Step(WAKE_STEPS[2], _wake_ready, starts=False),
)
SLEEP = _round(
    "sleep",
    (Status.READY, Status.SLEEPING, Status.SLEEPING),
    _SLEEPING,
    end=_asleep,
    settles_as="asleep",
)
WAKE = _round(
    "wake",
    (Status.SLEEPING, Status.WAKING, Status.READY),
    _WAKING,
    end=_awake,
    waiting=_wake_waiting,
)
