"""The lifecycle fault matrix: the worker is SIGKILLed at every provisioning and teardown step (a
forked process), recovery runs, and nothing is left in the cluster or missing from the chain."""

from __future__ import annotations

import pytest

from bench.portal import fault_matrix as fm
from portal.services import steps

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _chain_emptied_afterwards(transactional_db):
    """The flush after a transactional test cannot TRUNCATE the chain: empty it first."""
    yield
    from tests.audit.conftest import wipe_chain

    wipe_chain()


def test_every_step_killed_leaves_no_object_and_loses_no_event():
    report = fm.fault_matrix()
    rows = report["table"]
    assert report["trials"] == 2 * len(steps.PROVISIONING_STEPS) + len(steps.TEARDOWN_STEPS)
    assert {(r["phase"], r["step"]) for r in rows} == {
        *(("provisioning", s) for s in steps.PROVISIONING_STEPS),
        *(("teardown", s) for s in steps.TEARDOWN_STEPS),
    }
    for row in rows:
        assert row["killed"], row  # a real SIGKILL at that step
        assert row["final_status"] == "DELETED", row
        assert row["objects_left"] == 0, row
        assert row["events_lost"] == 0, row
        assert row["events_duplicated"] == 0, row


def test_the_counting_sees_a_lost_event_and_a_left_object(monkeypatch):
    """The matrix's own checks can fail: an object left and an event dropped are counted."""
    from audit.models import ChainEvent, OutboxEvent
    from kiln.cluster.models import SimulatedObject
    from portal.models import Environment

    trial = fm.run_trial(
        phase="teardown", step="cordon", recovery="resume", baseline=None, index=99
    )
    assert trial.objects_left == 0 and trial.events_lost == 0
    env = Environment.objects.get(name__startswith="fm-99")
    SimulatedObject.objects.create(
        api_version="v1", kind="ConfigMap", namespace=env.namespace, name="stray",
        uid="00000000-0000-0000-0000-000000000001", created_at=env.created_at,
        updated_at=env.created_at,
    )  # fmt: skip
    assert fm._objects_of(env) == 1
    last = (
        ChainEvent.objects.filter(target=f"portal.environment:{env.public_id}")
        .order_by("seq")
        .last()
    )
    OutboxEvent.objects.create(
        recorded_at=last.recorded_at,
        actor="x",
        action="portal.environment.noted",
        target=last.target,
        data={},
    )  # fmt: skip  (committed but never chained)
    _, problems = fm._chain_actions(env)
    assert any(p.startswith("lost: committed event") for p in problems)
    assert last is not None
