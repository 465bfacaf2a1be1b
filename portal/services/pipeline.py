"""The one driver of an environment's lifecycles: a pipeline is an ordered tuple of steps (data),
`pipeline_advance` takes it as far as it can go now.

A step is a small function of the pass (`Run`) returning done, pending or failed (`Result`);
those types, and `done`, `pending` and `failed` that make a result, are in
`portal/services/pipeline_data.py`.
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

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction

import audit
from kiln import changes
from kiln.errors import IllegalTransition
from kiln.identity.permissions import system_actor
from kiln.observability import continue_trace, tracer
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep
from portal.selectors import change_key
from portal.services.lifecycle import audit_target, environment_transition
from portal.services.pipeline_data import Move, Outcome, Pipeline, Result, Run, Step
from portal.services.steps import step_done, step_failed, step_started

PENDING, NOOP = "pending", "noop"


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


def _move(*, actor: Any, environment: Environment, to: Status, move: Move) -> None:
    """The lifecycle move `move` describes, to `to`, audited (`environment_transition`)."""
    environment_transition(
        actor=actor,
        environment=environment,
        to=to,
        reason=move.reason,
        updates=dict(move.updates),
        data=dict(move.data),
    )


def pipeline_enter(pipeline: Pipeline, *, actor: Any, environment: Environment, move: Move) -> None:
    """Move the environment into the pipeline's running state (`actor`'s move: a person's, when a
    person asked); a repeating pipeline's rows start afresh in the same transaction."""
    with transaction.atomic():
        _move(actor=actor, environment=environment, to=pipeline.runs_in, move=move)
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
        _move(
            actor=result.actor or run.actor,
            environment=env,
            to=result.to,
            move=Move(result.reason, result.updates, result.data),
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
        _move(actor=run.actor, environment=run.environment, to=pipeline.ends_in, move=end)

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


__all__ = [
    "NOOP",
    "PENDING",
    "Move",
    "Outcome",
    "Pipeline",
    "Result",
    "Run",
    "Step",
    "pipeline_advance",
    "pipeline_enter",
]
