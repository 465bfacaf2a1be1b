"""The one driver of an environment's lifecycles: a pipeline is an ordered tuple of steps (data),
`pipeline_advance` takes it as far as it can go now.

A step is a small function of the pass (`Run`) returning done, pending or failed (`Result`).
The driver, not the step, records what happened, turns outcomes into lifecycle states and owns
the pipeline's span:

- a step already done (its `ProvisioningStep` row) is skipped, so a pass after a crash or a
  redelivered task resumes at the first unfinished step; a step `when` excludes is not part of
  this environment's pipeline;
- a step that `starts` is recorded running before it runs, committed together with everything
  recorded so far: its own writes (to the cluster, or to its row) follow a durable record of
  what came before. A `guard` is asked first: a result from it ends the step unstarted (a
  wait for something outside, or nothing to do);
- done: `step_done` (its `portal.provisioning_step.completed` event, with the step's own
  writes, `Result.record`, in the same transaction), held until the pipeline next commits;
- pending: what is recorded is committed, and the pipeline's `waiting` hook says what a wait
  means now: the same wait, or a failure (objects degraded, a deadline passed);
- failed: in one transaction, what is recorded, the failed step's row and the move to
  `Result.to` (FAILED unless the failure names another state, e.g. QUARANTINED);
- the last step's done and the move to the pipeline's end state (READY, DELETED) commit
  together; when another worker ended it first, the earlier steps' records are kept. A pipeline
  that ends in the state it runs in (sleeping: it stays SLEEPING, asleep) `settles_as` an audit
  event instead of a move, with the end's fields; once every step is done a pass is a no-op.

The pipeline enters its running state (APPROVED -> PROVISIONING) with its first commit, so the
CPU work of steps that do not start (composition, policies) runs outside any row lock.
An exception from a step propagates (the task retries it); what the pass had not committed is
dropped, and the next pass does that work again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import transaction

import audit
from kiln import changes
from kiln.errors import IllegalTransition
from kiln.identity.permissions import Actor, system_actor
from kiln.observability import continue_trace, tracer
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep
from portal.selectors import change_key
from portal.services.lifecycle import audit_target, environment_transition
from portal.services.steps import step_done, step_failed, step_started

PENDING, NOOP = "pending", "noop"


class Outcome(StrEnum):
    """What a step says of itself."""

    DONE = "done"
    PENDING = "pending"
    FAILED = "failed"


@dataclass(frozen=True)
class Result:
    """A step's outcome and what the driver records with it."""

    outcome: Outcome
    detail: str = ""  # the step row's detail
    data: Mapping[str, Any] = field(default_factory=dict)  # on the step's event, or the failure's
    record: Callable[[], None] | None = (
        None  # the step's own writes, in the transaction of its record
    )
    reason: str = ""  # failed: the move's reason; pending: why it waits
    remaining: tuple[str, ...] = ()  # pending: what is still there
    bounded: bool = True  # pending: the pipeline's deadline applies (False: the step has its own)
    to: Status = Status.FAILED  # failed: the state it ends in
    actor: Actor | None = None  # failed: who moves it, when not the pipeline's actor
    updates: Mapping[str, Any] = field(default_factory=dict)  # failed: fields set with the move
    failed_step: str | None = None  # failed: the row marked failed (None: this step; "": none)


def done(detail: str = "", *, data: Mapping[str, Any] | None = None, record=None) -> Result:
    """The step is done; `record` runs in the transaction that records it."""
    return Result(Outcome.DONE, detail=detail, data=data or {}, record=record)


def pending(reason: str = "", *, remaining: tuple[str, ...] = (), bounded: bool = True) -> Result:
    """The step waits for something outside; the pipeline asks again on its next pass."""
    return Result(Outcome.PENDING, reason=reason, remaining=remaining, bounded=bounded)


def failed(
    reason: str,
    *,
    detail: str = "",
    data: Mapping[str, Any] | None = None,
    record=None,
    to: Status = Status.FAILED,
    actor: Actor | None = None,
    updates: Mapping[str, Any] | None = None,
    failed_step: str | None = None,
) -> Result:
    """The pipeline stops in `to` (FAILED by default) with `reason`."""
    return Result(
        Outcome.FAILED,
        detail=detail or reason,
        data=data or {},
        record=record,
        reason=reason,
        to=to,
        actor=actor,
        updates=updates or {},
        failed_step=failed_step,
    )


@dataclass
class Run:
    """One pass of a pipeline over one environment: what the steps read and share."""

    pipeline: Pipeline
    environment: Environment
    actor: Actor
    rows: dict[str, tuple[str, datetime | None]]  # step name -> (status, started_at)
    memo: dict[str, Any] = field(default_factory=dict)  # values steps share within the pass

    @property
    def backend(self):
        """The delivery backend, looked up once a pass."""
        if "backend" not in self.memo:
            self.memo["backend"] = self.pipeline.backend()
        return self.memo["backend"]

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        """`compute()` the first time `key` is asked for in this pass, the same value after."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]


def _always(run: Run) -> bool:
    return True


@dataclass(frozen=True)
class Step:
    """One step of a pipeline: its name (its row's), what it does, and how the driver runs it."""

    name: str
    run: Callable[[Run], Result]
    starts: bool = True  # recorded running (and what came before committed) before it runs
    guard: Callable[[Run], Result | None] | None = None  # asked before the start: a result ends it
    when: Callable[[Run], bool] = _always  # whether this environment's pipeline has the step


@dataclass(frozen=True)
class Move:
    """A lifecycle move the pipeline makes: why, and the fields and audit data that go with it."""

    reason: str
    updates: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pipeline:
    """A lifecycle as data: entered from one state, run in another, ended in a third."""

    name: str
    span: str  # the span the driver opens for a pass
    actor: str  # the system actor of its moves and records
    steps: tuple[Step, ...]
    enters_from: Status  # e.g. APPROVED
    runs_in: Status  # e.g. PROVISIONING
    ends_in: Status  # e.g. READY
    entry: Callable[[Run], Move]
    end: Callable[[Run], Move]
    backend: Callable[[], Any]
    waiting: Callable[[Run, Step, Result], Result] = lambda run, step, result: result
    joins_request_trace: bool = False  # the span continues the request's trace
    repeats: bool = False  # entered again and again (sleep, wake): its rows start afresh
    # Ends in the state it runs in: the end is `portal.environment.<settles_as>`, not a move.
    settles_as: str = ""

    @property
    def step_names(self) -> tuple[str, ...]:
        """Its steps' names, in order."""
        return tuple(s.name for s in self.steps)


class _Pass:
    """The records of one pass not yet committed, and how they commit."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.entering = Status(run.environment.status) == run.pipeline.enters_from
        self.records: list[tuple[str, Callable[[], None]]] = []

    def started(self, name: str) -> None:
        """Hold the step's start until the next commit."""
        env = self.run.environment
        self.records.append((name, lambda: step_started(environment=env, name=name)))

    def done(self, name: str, result: Result) -> None:
        """Hold the step's done (and its own writes) until the next commit."""
        run = self.run

        def record() -> None:
            with transaction.atomic(savepoint=False):
                if result.record is not None:
                    result.record()
                step_done(
                    actor=run.actor,
                    environment=run.environment,
                    name=name,
                    detail=result.detail,
                    data=dict(result.data),
                )

        self.records.append((name, record))

    def _enter(self) -> None:
        run, pipeline = self.run, self.run.pipeline
        pipeline_enter(
            pipeline, actor=run.actor, environment=run.environment, move=pipeline.entry(run)
        )

    def commit(self, *, then: Callable[[], None] | None = None, skip: str = "") -> None:
        """Commit the held records (not those of step `skip`). With the entry move (when due)
        or a move `then`, all in one transaction, so a move never commits without the records
        before it; else each record on its own (each is atomic, and a crash between two leaves
        the earlier recorded, as between two steps)."""
        records = [record for name, record in self.records if not skip or name != skip]
        if self.entering or then is not None:
            with transaction.atomic():
                if self.entering:
                    self._enter()
                for record in records:
                    record()
                if then is not None:
                    then()
        else:
            for record in records:
                record()
        self.entering, self.records = False, []


def pipeline_enter(pipeline: Pipeline, *, actor: Any, environment: Environment, move: Move) -> None:
    """Move the environment into the pipeline's running state (`actor`'s move: a person's, when a
    person asked); a repeating pipeline's rows start afresh in the same transaction."""
    with transaction.atomic():
        environment_transition(
            actor=actor,
            environment=environment,
            to=pipeline.runs_in,
            reason=move.reason,
            updates=dict(move.updates),
            data=dict(move.data),
        )
        if pipeline.repeats:  # a new round: the last round's rows no longer say anything is done
            ProvisioningStep.objects.filter(
                environment=environment, name__in=pipeline.step_names
            ).update(status=ProvisioningStep.PENDING, detail="", finished_at=None)


def _steps_of(env: Environment, pipeline: Pipeline) -> dict[str, tuple[str, datetime | None]]:
    """The pipeline's step rows (status, started_at); none count before it is entered."""
    if Status(env.status) == pipeline.enters_from:
        return {}
    rows = ProvisioningStep.objects.filter(environment=env, name__in=pipeline.step_names)
    return {
        name: (status, at) for name, status, at in rows.values_list("name", "status", "started_at")
    }


def _span(pipeline: Pipeline, env: Environment):
    if pipeline.joins_request_trace:
        return continue_trace(env.traceparent, pipeline.span)
    return tracer("kiln.portal").start_as_current_span(pipeline.span)


def pipeline_advance(pipeline: Pipeline, *, environment_id: int) -> str:
    """Advance `pipeline` as far as it can go now: the end state's name (`ready`, `deleted`),
    a failure's (`failed`, `quarantined`), `pending` (ask again later) or `noop`."""
    env = Environment.objects.select_related("team", "request__requested_by").get(pk=environment_id)
    with _span(pipeline, env) as span:
        span.set_attribute("kiln.environment", env.public_id)
        if env.status not in (pipeline.enters_from, pipeline.runs_in):
            return NOOP
        run = Run(
            pipeline=pipeline,
            environment=env,
            actor=system_actor(pipeline.actor),
            rows=_steps_of(env, pipeline),
        )
        outcome = _advance(run, _Pass(run))
        span.set_attribute("kiln.pipeline.outcome", outcome)
        return outcome


def _advance(run: Run, records: _Pass) -> str:
    pipeline = run.pipeline
    left = False  # a step of this pass was not done before it
    for step in pipeline.steps:
        if run.rows.get(step.name, ("",))[0] == ProvisioningStep.DONE or not step.when(run):
            continue
        left = True
        result = step.guard(run) if step.guard is not None else None
        if result is None:
            if step.starts:
                records.started(step.name)
                try:
                    records.commit()
                except IllegalTransition:  # another worker entered it first: that one goes on
                    return NOOP
            result = step.run(run)
        if result.outcome == Outcome.PENDING:
            try:
                records.commit()
            except IllegalTransition:
                return NOOP
            result = pipeline.waiting(run, step, result)
            if result.outcome == Outcome.PENDING:
                return PENDING
        if result.outcome == Outcome.FAILED:
            return _fail(run, records, step, result)
        records.done(step.name, result)
    if pipeline.settles_as and not left and not records.entering:
        return NOOP  # settled already: its end was committed with its last step
    return _end(run, records)


def _fail(run: Run, records: _Pass, step: Step, result: Result) -> str:
    """What is recorded, the failed step's row and the move to `result.to`, together."""
    env, name = run.environment, step.name if result.failed_step is None else result.failed_step

    def move() -> None:
        if result.record is not None:
            result.record()
        if name:
            step_failed(environment=env, name=name, detail=result.detail)
        environment_transition(
            actor=result.actor or run.actor,
            environment=env,
            to=result.to,
            reason=result.reason,
            updates=dict(result.updates),
            data=dict(result.data),
        )

    try:
        records.commit(then=move)
    except IllegalTransition:  # another worker moved it first
        return _moved_elsewhere(records)
    return result.to.value.lower()


def _end(run: Run, records: _Pass) -> str:
    """The last step's done and the move to the end state, together."""
    pipeline = run.pipeline

    def move() -> None:
        end = pipeline.end(run)
        if pipeline.settles_as:
            _settle(run, end)
            return
        environment_transition(
            actor=run.actor,
            environment=run.environment,
            to=pipeline.ends_in,
            reason=end.reason,
            updates=dict(end.updates),
            data=dict(end.data),
        )

    try:
        records.commit(then=move)
    except IllegalTransition:
        return _moved_elsewhere(records, skip=pipeline.steps[-1].name)
    return pipeline.ends_in.value.lower()


def _settle(run: Run, end: Move) -> None:
    """The end of a pipeline that stays in its running state: its fields and its audit event,
    under the row lock, if the environment is still in that state (else another worker moved it)."""
    env, pipeline = run.environment, run.pipeline
    locked = Environment.objects.select_for_update(of=("self",)).get(pk=env.pk)
    if Status(locked.status) != pipeline.runs_in:
        raise IllegalTransition(
            f"an environment in {locked.status} cannot settle in {pipeline.runs_in}",
            extra={"from": locked.status, "to": pipeline.runs_in.value},
        )
    for name, value in end.updates.items():
        setattr(locked, name, value)
        setattr(env, name, value)
    locked.save(update_fields=[*end.updates, "updated_at"])
    audit.record(
        run.actor,
        f"portal.environment.{pipeline.settles_as}",
        audit_target(locked),
        {"status": locked.status, "reason": end.reason, "team": env.team.slug, **end.data},
    )
    changes.notify_after_commit(change_key(locked))


def _moved_elsewhere(records: _Pass, *, skip: str = "") -> str:
    """Another worker moved the environment first. If it entered the pipeline, that worker goes
    on and this pass records nothing; else the work this pass did is kept, recorded once (but
    not the last step's, whose done belongs with the end)."""
    if not records.entering:
        records.commit(skip=skip)
    return NOOP
