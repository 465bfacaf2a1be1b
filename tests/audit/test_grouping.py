"""The explorer's grouping of a rollout's ticks (audit/explorer/grouping.py): pure, worked cases."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from audit.explorer.grouping import Group, Row, group_rows


@dataclass
class E:
    seq: int
    action: str
    target: str


TICK = "canary.tick.decided"


def shape(items):
    return [
        (f"{i.target}x{len(i.events)}:{[e.seq for e in i.events]}" if isinstance(i, Group)
         else i.event.seq)
        for i in items
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        # Three ticks of r1 among other entries: one group where its newest tick was (seq 9).
        (
            [E(10, "portal.environment.ready", "env"), E(9, TICK, "r1"), E(8, TICK, "r1"),
             E(7, "canary.rollout.advanced", "r1"), E(6, TICK, "r1")],
            [10, "r1x3:[9, 8, 6]", 7],
        ),
        # Two rollouts' ticks interleaved: a group each, in order of their newest tick.
        (
            [E(5, TICK, "r2"), E(4, TICK, "r1"), E(3, TICK, "r2"), E(2, TICK, "r1")],
            ["r2x2:[5, 3]", "r1x2:[4, 2]"],
        ),
        # One tick of a rollout on the page stays a plain row.
        ([E(2, TICK, "r1"), E(1, TICK, "r2")], [2, 1]),
        ([], []),
    ],
    ids=["ticks-among-others", "two-rollouts-interleaved", "single-ticks-stay-rows", "empty"],
)  # fmt: skip
def test_ticks_fold_under_their_rollout(events, expected):
    items = group_rows(events)
    assert shape(items) == expected
    # Nothing is lost or shown twice.
    seen = [e.seq for i in items for e in (i.events if isinstance(i, Group) else [i.event])]
    assert sorted(seen) == sorted(e.seq for e in events)
    assert all(isinstance(i, (Row, Group)) for i in items)
