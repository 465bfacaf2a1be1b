"""The lifecycle fault matrix: SIGKILL the worker at every provisioning and teardown step, recover,
and count what the kill left behind in the cluster and in the audit chain.

One trial = one environment and one step. A forked child process is the worker: it runs the
provisioning (or teardown) service as the Celery task would, and when it reaches the step it
stops just before recording it done (the step's work is in the cluster, its record is not) and
tells the parent, which kills it with SIGKILL. The parent then recovers as production does:

- `resume`: the task is redelivered (acks_late) and runs the service again until READY, then the
  environment is torn down (a teardown kill is always recovered this way, to DELETED);
- `fail`: the stalled provisioning is FAILED (as its timeout does) and the reaper tears it down
  once the class's FAILED grace has passed (the way out of a half-provisioned environment).

Then the audit writer drains, and the trial counts:
- objects_left: simulated-cluster objects of the environment (its namespace, or labelled with
  its request id) after DELETED;
- events_lost: committed outbox events of the environment missing from the hash chain, steps
  done without their `provisioning_step.completed` event, gaps in the chain of transitions
  (each event's `from` is the previous one's `to`, SUBMITTED ... DELETED), and for `resume`
  trials actions a kill-free baseline run has that the trial lacks;
- events_duplicated: actions the trial has more often than the baseline (resume) or steps
  completed twice. Not counted as duplicates: the tenant audit sink's archived batches
  (`portal.environment.tenant_audit_archived`). They record requests the tenant's API server
  served, each with its own auditID, and a redelivered step really sends its request again
  (a real API server audits the repeat too). Fewer of them than the baseline still counts as
  lost, and the trial's detail gives both numbers.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone

from audit.chain.writer import AuditWriter
from audit.models import ChainEvent, OutboxEvent
from kiln.cluster.models import SimulatedObject
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import ENGINEER, Actor
from portal import conf
from portal.lifecycle import ARRIVAL_VERB, Status
from portal.models import Environment
from portal.services import pipeline, steps
from portal.services.provisioning import PENDING, environment_mark_failed, environment_provision
from portal.services.queueing import tasks_held
from portal.services.reaper import environments_reap_expired
from portal.services.requests import environment_request_submit
from portal.services.teardown import environment_teardown, environment_teardown_request
from portal.services.tenant_audit import ARCHIVED

TEAM = "fault-matrix"
USER = "fault-matrix-engineer"
CHILD_TIMEOUT = 60.0
TRANSITION_ACTIONS = frozenset(f"portal.environment.{verb}" for verb in ARRIVAL_VERB.values())
# Records of requests another server served (see the module docstring): more is not a duplicate.
SERVED_REQUESTS = frozenset({ARCHIVED})


@dataclass
class Trial:
    """One row of the matrix."""

    phase: str  # provisioning | teardown
    step: str
    recovery: str  # resume | fail
    killed: bool = False  # the child died of SIGKILL at the step
    final_status: str = ""
    objects_left: int = 0
    events_lost: int = 0
    events_duplicated: int = 0
    detail: list[str] = field(default_factory=list)


def bench_actor() -> Actor:
    team, _ = Team.objects.get_or_create(slug=TEAM, defaults={"name": "Fault matrix"})
    user, _ = get_user_model().objects.get_or_create(username=USER)
    Membership.objects.get_or_create(user=user, team=team)
    return Actor(
        username=USER, roles=frozenset({ENGINEER}), teams=frozenset({TEAM}), user_id=user.pk
    )


def drain_audit() -> None:
    """Chain everything committed so far, as the audit writer process does."""
    AuditWriter(block_ms=0).run_once()


def submit_environment(name: str) -> Environment:
    data = {
        "team": TEAM, "name": name, "env_class": "dev", "ttl_hours": 24,
        "workload_class": "standard", "cpu": 2, "memory_gib": 4, "gpu": 0,
        "tenant_control_plane": True, "spot_node_pool": True, "database": True,
        "justification": "fault matrix",
    }  # fmt: skip
    env, _ = environment_request_submit(actor=bench_actor(), data=data)
    return env


def run_until_settled(service: Callable[..., str], env_id: int, *, limit: float = 30.0) -> str:
    """Run a re-entrant service until it stops answering PENDING (the audit writer runs between)."""
    deadline = time.monotonic() + limit
    while True:
        result = service(environment_id=env_id)
        if result != PENDING or time.monotonic() > deadline:
            return result
        drain_audit()
        time.sleep(conf.poll_seconds() / 10)


def _pause_at(step: str, ready_file: str) -> None:
    """In the child: stop forever just before `step` is recorded done, after telling the parent."""
    real = steps.step_done

    def step_done(**kwargs: Any) -> bool:
        if kwargs.get("name") == step:
            Path(ready_file).write_text(str(os.getpid()))
            while True:
                time.sleep(1)
        return real(**kwargs)

    pipeline.step_done = step_done  # the driver records every step of both pipelines


def _kill_at(step: str, work: Callable[[], Any]) -> tuple[bool, str]:
    """Fork a worker running `work`; SIGKILL it when it reaches `step`. (killed, how it ended)."""
    fd, ready = tempfile.mkstemp(prefix="kiln-fault-", suffix=".pid")
    os.close(fd)
    os.unlink(ready)
    connections.close_all()
    pid = os.fork()
    if pid == 0:  # the worker: its own database connection; never returns
        code = 0
        try:
            _pause_at(step, ready)
            work()
        except BaseException:  # noqa: BLE001 - the child reports by exit code only
            code = 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_TIMEOUT
    while not os.path.exists(ready):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done or time.monotonic() > deadline:
            if not done:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            return False, f"the worker never reached {step} (exit status {status})"
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.unlink(ready)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return killed, "SIGKILL" if killed else f"exit status {status}"


def _objects_of(env: Environment) -> int:
    namespaced = SimulatedObject.objects.filter(namespace=env.namespace).count()
    labelled = SimulatedObject.objects.filter(
        namespace="", labels__contains={"kiln.dev/request-id": env.public_id}
    ).count()
    namespace = SimulatedObject.objects.filter(kind="Namespace", name=env.namespace).count()
    return namespaced + labelled + namespace


def _chain_actions(env: Environment) -> tuple[Counter, list[str]]:
    """Actions of the environment's chained events (step events by step), and the problems found.

    The writer prunes outbox rows it has chained, so an outbox row of the environment still
    there after a full drain, and not in the chain, is an event that did not make it.
    """
    target = f"portal.environment:{env.public_id}"
    problems = []
    chain = list(ChainEvent.objects.filter(target=target).order_by("seq"))
    chained = {e.event_id for e in chain}
    for missing in OutboxEvent.objects.filter(target=target).exclude(event_id__in=chained):
        problems.append(
            f"lost: committed event {missing.event_id} ({missing.action}) is not chained"
        )
    actions: Counter = Counter()
    last_to = None
    for event in chain:
        data = json.loads(event.data)
        key = event.action
        if event.action == "portal.provisioning_step.completed":
            key = f"{event.action}:{data.get('step')}"
        actions[key] += 1
        if event.action not in TRANSITION_ACTIONS or "to" not in data:
            continue  # (the approval decision shares its verb with the move, without from/to)
        if last_to is not None and data["from"] != last_to:
            problems.append(f"lost: the move into {data['from']} has no event")
        last_to = data["to"]
    for name in env.steps.filter(status="done").values_list("name", flat=True):
        if actions[f"portal.provisioning_step.completed:{name}"] == 0:
            problems.append(f"lost: step {name} is done without its event")
    return actions, problems


def _finish_teardown(env: Environment) -> str:
    result = run_until_settled(environment_teardown, env.pk)
    drain_audit()
    return result


def run_trial(
    *, phase: str, step: str, recovery: str, baseline: Counter | None, index: int
) -> Trial:
    """One environment, one kill, one recovery; counts as the module docstring says."""
    trial = Trial(phase=phase, step=step, recovery=recovery)
    with tasks_held():
        env = submit_environment(f"fm-{index}-{step}"[:40].rstrip("-"))
        if phase == "provisioning":
            trial.killed, how = _kill_at(
                step, lambda: run_until_settled(environment_provision, env.pk)
            )
        else:
            assert run_until_settled(environment_provision, env.pk) == "ready"
            env.refresh_from_db()
            environment_teardown_request(
                actor=bench_actor(), environment=env, reason="fault matrix"
            )
            trial.killed, how = _kill_at(
                step, lambda: run_until_settled(environment_teardown, env.pk)
            )
        trial.detail.append(f"worker: {how}")
        env.refresh_from_db()
        if phase == "provisioning" and recovery == "resume":
            result = run_until_settled(environment_provision, env.pk)
            trial.detail.append(f"redelivered provisioning: {result}")
            env.refresh_from_db()
            environment_teardown_request(
                actor=bench_actor(), environment=env, reason="fault matrix"
            )
        elif phase == "provisioning":
            environment_mark_failed(
                environment_id=env.pk, reason="worker lost; provisioning timed out"
            )
            env.refresh_from_db()
            grace = conf.class_lifecycle(env.env_class).failed_grace
            environments_reap_expired(now=env.updated_at + timedelta(seconds=grace), dry_run=False)
        trial.detail.append(f"teardown: {_finish_teardown(env)}")
    env.refresh_from_db()
    trial.final_status = env.status
    trial.objects_left = _objects_of(env)
    actions, problems = _chain_actions(env)
    if baseline is not None:
        for action, n in baseline.items():
            if actions[action] < n:
                problems.append(f"lost: {action} x{n - actions[action]}")
        extra = [
            f"{a} x{n - baseline[a]}"
            for a, n in actions.items()
            if n > baseline[a] and a not in SERVED_REQUESTS
        ]
        trial.detail += [
            f"{a}: {actions[a]} (baseline {baseline[a]})" for a in sorted(SERVED_REQUESTS)
        ]
        trial.events_duplicated = len(extra)
        trial.detail += [f"duplicated: {e}" for e in extra]
    else:
        twice = [
            a for a, n in actions.items() if a.startswith("portal.provisioning_step") and n > 1
        ]
        trial.events_duplicated = len(twice)
    trial.events_lost = sum(p.startswith("lost:") for p in problems)
    trial.detail += problems
    if env.status != Status.DELETED:
        trial.detail.append(f"ended {env.status}: {env.status_reason}")
    return trial


def baseline_actions() -> Counter:
    """The actions of a kill-free life: submit, provision to READY, tear down to DELETED."""
    with tasks_held():
        env = submit_environment("fm-baseline")
        run_until_settled(environment_provision, env.pk)
        env.refresh_from_db()
        environment_teardown_request(actor=bench_actor(), environment=env, reason="fault matrix")
        _finish_teardown(env)
    env.refresh_from_db()
    actions, problems = _chain_actions(env)
    if env.status != Status.DELETED or problems:
        raise RuntimeError(f"the baseline run did not end cleanly: {env.status} {problems}")
    return actions


def fault_matrix() -> dict[str, Any]:
    """Every step of both pipelines killed once per recovery; the table and its totals."""
    started = timezone.now()
    baseline = baseline_actions()
    rows: list[Trial] = []
    plan = [("provisioning", s, r) for s in steps.PROVISIONING_STEPS for r in ("resume", "fail")]
    plan += [("teardown", s, "resume") for s in steps.TEARDOWN_STEPS]
    for i, (phase, step, recovery) in enumerate(plan):
        rows.append(
            run_trial(
                phase=phase,
                step=step,
                recovery=recovery,
                baseline=baseline if recovery == "resume" else None,
                index=i,
            )
        )
    return {
        "trials": len(rows),
        "killed": sum(r.killed for r in rows),
        "objects_left": sum(r.objects_left for r in rows),
        "events_lost": sum(r.events_lost for r in rows),
        "events_duplicated": sum(r.events_duplicated for r in rows),
        "all_deleted": all(r.final_status == Status.DELETED for r in rows),
        "seconds": round((timezone.now() - started).total_seconds(), 1),
        "table": [asdict(r) for r in rows],
    }
