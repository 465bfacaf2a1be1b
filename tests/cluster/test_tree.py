"""An object's recent events as the resource tree lists them: newest first, creation oldest."""

from __future__ import annotations

from kiln.cluster.tree import RECENT_EVENTS, events_of


def _obj(created: str, *conditions: tuple[str, str, str], deleting: str = "") -> dict:
    metadata = {"name": "q", "creationTimestamp": created}
    if deleting:
        metadata["deletionTimestamp"] = deleting
    return {
        "metadata": metadata,
        "status": {
            "conditions": [
                {"type": kind, "status": status, "lastTransitionTime": at}
                for kind, status, at in conditions
            ]
        },
    }


def test_events_stamped_in_one_second_keep_the_order_they_happened_in():
    at = "2026-12-07T10:18:52Z"
    events = events_of(_obj(at, ("Ready", "True", at), deleting=at))
    assert [e.reason for e in events] == ["Deleting", "Ready=True", "Created"]


def test_later_events_come_first_and_a_false_condition_is_a_warning():
    events = events_of(
        _obj(
            "2026-12-07T10:00:00Z",
            ("Ready", "False", "2026-12-07T10:00:05Z"),
            ("Synced", "True", "2026-12-07T10:00:01Z"),
        )
    )
    assert [e.reason for e in events] == ["Ready=False", "Synced=True", "Created"]
    assert [e.warning for e in events] == [True, False, False]


def test_only_the_most_recent_events_are_kept():
    conditions = [(f"C{i}", "True", f"2026-12-07T10:00:{i:02d}Z") for i in range(1, 9)]
    events = events_of(_obj("2026-12-07T10:00:00Z", *conditions))
    assert len(events) == RECENT_EVENTS
    assert events[0].reason == "C8=True"
    assert "Created" not in [e.reason for e in events]


def test_an_absent_object_has_no_events():
    assert events_of(None) == ()
    assert events_of({}) == ()
