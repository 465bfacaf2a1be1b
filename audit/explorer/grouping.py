"""The explorer's grouping of a page of entries: a rollout's analysis ticks under their rollout.

A rollout records one `canary.tick.decided` a tick, so a page of the chain can be mostly ticks.
Within one page, every tick of a target (the rollout) goes into one group, placed where its
newest tick was; a target with a single tick on the page stays a plain row. Pure: any objects
with `seq`, `action` and `target` attributes, in the order shown (newest first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GROUPED_ACTIONS = frozenset({"canary.tick.decided"})


@dataclass
class Row:
    """One entry shown as itself."""

    event: Any
    group: bool = False


@dataclass
class Group:
    """Entries of one action and target shown as one collapsible row (newest first)."""

    action: str
    target: str
    events: list[Any] = field(default_factory=list)
    group: bool = True

    @property
    def newest(self) -> Any:
        return self.events[0]

    @property
    def oldest(self) -> Any:
        return self.events[-1]


def group_rows(events: list[Any]) -> list[Row | Group]:
    """The page's entries with each target's ticks folded into one Group where it has two or more."""
    counts: dict[tuple[str, str], int] = {}
    for e in events:
        if e.action in GROUPED_ACTIONS:
            counts[(e.action, e.target)] = counts.get((e.action, e.target), 0) + 1
    out: list[Row | Group] = []
    groups: dict[tuple[str, str], Group] = {}
    for e in events:
        key = (e.action, e.target)
        if counts.get(key, 0) < 2:
            out.append(Row(e))
            continue
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(action=e.action, target=e.target)
            out.append(group)
        group.events.append(e)
    return out
