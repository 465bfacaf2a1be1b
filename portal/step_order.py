"""The order an environment's Progress tab lists its steps in. No Django: any objects with a
`position`, `id`, `started_at` and `finished_at` (ProvisioningStep rows).

Each pipeline has ten places (`portal.services.steps.POSITION`): provisioning's first, then
the others (the last sleep, the last wake, teardown) in the order they last did something,
one that never did last; within a pipeline, its own order. A step's row is reused when its
pipeline runs again (its first start kept), so a pipeline's place is its latest start or end,
not its first.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar

Step = TypeVar("Step", bound=Any)

FIRST = datetime.min.replace(tzinfo=UTC)
NEVER = datetime.max.replace(tzinfo=UTC)


def pipeline_of(position: int) -> int:
    """The pipeline a step's position belongs to (0: provisioning)."""
    return position // 10


def in_order(steps: Iterable[Step]) -> list[Step]:
    """`steps` as the Progress tab lists them (the module docstring)."""
    steps = list(steps)
    latest: dict[int, datetime] = {}
    for step in steps:
        group = pipeline_of(step.position)
        for moment in (step.started_at, step.finished_at):
            if moment is not None and (group not in latest or moment > latest[group]):
                latest[group] = moment

    def place(step: Step) -> tuple[datetime, int, int]:
        group = pipeline_of(step.position)
        return (FIRST if group == 0 else latest.get(group, NEVER)), step.position, step.id

    return sorted(steps, key=place)
