"""A pipeline as data: its steps, what a step returns (`Result`, made by `done`, `pending` and
`failed`), the moves it makes and the pass (`Run`) its steps read. The driver that runs them is
`portal/services/pipeline.py`, which re-exports every name here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from kiln.identity.permissions import Actor
from portal.lifecycle import Status
from portal.models import Environment


class Outcome(StrEnum):
    """What a step says of itself."""

    DONE = "done"
    PENDING = "pending"
    FAILED = "failed"


def _always(run: Run) -> bool:
    """A step every environment's pipeline has."""
    return True


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
