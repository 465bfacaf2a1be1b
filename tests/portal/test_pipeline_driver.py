"""The pipeline driver alone, over toy pipelines: what it records for a step done, pending, failed
or raising, how it turns outcomes into states, and how it resumes after a crash."""

from __future__ import annotations

from collections import Counter

import pytest

from audit.models import OutboxEvent
from portal.lifecycle import Status
from portal.models import Environment, ProvisioningStep
from portal.services import environment_request_submit, pipeline
from portal.services.pipeline import Move, Pipeline, Run, Step, pipeline_advance
from portal.services.pipeline_data import done, failed, pending
from portal.services.provisioning import PROVISIONING
from portal.services.queueing import tasks_held
from portal.services.steps import PROVISIONING_STEPS, TEARDOWN_STEPS
from portal.services.teardown import TEARDOWN
from tests.portal.conftest import request_data

pytestmark = pytest.mark.django_db
COMPLETED = "portal.provisioning_step.completed"


class Script:
    """Steps whose outcomes a test sets, counting how often each ran."""

    def __init__(self, **outcomes) -> None:
        self.outcomes = outcomes  # name -> a Result, or an exception to raise
        self.runs: Counter[str] = Counter()

    def step(self, name: str, **options) -> Step:
        def run(_: Run):
            self.runs[name] += 1
            outcome = self.outcomes.get(name, done(f"{name} done"))
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        return Step(name, run, **options)


def toy(script: Script, *steps: Step, **options) -> Pipeline:
    """APPROVED -> PROVISIONING -> READY over the given steps (default: one, two, three; two and
    three start, one is pure work recorded with the first commit)."""
    steps = steps or (
        script.step("one", starts=False),
        script.step("two"),
        script.step("three"),
    )
    return Pipeline(
        name="toy",
        span="portal.environment.toy",
        actor="provisioner",
        steps=steps,
        enters_from=Status.APPROVED,
        runs_in=Status.PROVISIONING,
        ends_in=Status.READY,
        entry=lambda run: Move("toy started"),
        end=lambda run: Move("toy ended", data={"ended": True}),
        backend=lambda: None,
        **options,
    )


@pytest.fixture
def env(people) -> Environment:
    environment, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert environment.status == Status.APPROVED
    return environment


def rows(env: Environment) -> dict[str, tuple[str, int, str]]:
    return {
        s.name: (s.status, s.attempts, s.detail)
        for s in ProvisioningStep.objects.filter(environment=env)
    }


def actions(env: Environment) -> list[str]:
    events = OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}")
    return [
        f"{e.action}:{e.data['step']}" if e.action == COMPLETED else e.action
        for e in events.order_by("id")
    ][3:]  # after submitted, queued_for_approval, approved


def status(env: Environment) -> str:
    return Environment.objects.get(pk=env.pk).status


def test_every_step_done_ends_in_the_end_state_with_each_step_recorded_once(env):
    script = Script()
    assert pipeline_advance(toy(script), environment_id=env.pk) == "ready"
    assert status(env) == Status.READY
    assert rows(env) == {
        "one": ("done", 1, "one done"),
        "two": ("done", 1, "two done"),
        "three": ("done", 1, "three done"),
    }
    assert actions(env) == [
        "portal.environment.provisioning_started",
        f"{COMPLETED}:one",
        f"{COMPLETED}:two",
        f"{COMPLETED}:three",
        "portal.environment.readied",
    ]
    ended = OutboxEvent.objects.get(action="portal.environment.readied", data__ended=True)
    assert ended.data["reason"] == "toy ended"
    # A pass over an ended pipeline changes nothing.
    assert pipeline_advance(toy(script), environment_id=env.pk) == "noop"
    assert script.runs == Counter(one=1, two=1, three=1)


def test_a_pending_step_keeps_what_came_before_and_the_next_pass_resumes_at_it(env):
    script = Script(two=pending("not yet"))
    assert pipeline_advance(toy(script), environment_id=env.pk) == "pending"
    assert status(env) == Status.PROVISIONING
    # The step before is recorded done; the waiting step is started, the one after untouched.
    assert rows(env) == {"one": ("done", 1, "one done"), "two": ("running", 1, "")}
    assert actions(env) == ["portal.environment.provisioning_started", f"{COMPLETED}:one"]

    script.outcomes.clear()
    assert pipeline_advance(toy(script), environment_id=env.pk) == "ready"
    assert script.runs == Counter(one=1, two=2, three=1)  # one is not done again
    assert rows(env)["two"] == ("done", 2, "two done")  # started by both passes
    assert actions(env).count(f"{COMPLETED}:two") == 1


def test_a_guard_ends_a_step_unstarted(env):
    script = Script()
    guarded = toy(
        script,
        script.step("one"),
        script.step("two", guard=lambda run: pending("outside not there yet")),
        script.step("three"),
    )
    assert pipeline_advance(guarded, environment_id=env.pk) == "pending"
    assert rows(env) == {"one": ("done", 1, "one done")}  # two has no row: it never started
    assert script.runs == Counter(one=1)


def test_a_guard_that_finds_nothing_to_do_records_the_step_done_without_a_start(env):
    script = Script()
    guarded = toy(
        script,
        script.step("one"),
        script.step("two", guard=lambda run: done("nothing to wait for")),
        script.step("three"),
    )
    assert pipeline_advance(guarded, environment_id=env.pk) == "ready"
    assert rows(env)["two"] == ("done", 1, "nothing to wait for")
    assert script.runs == Counter(one=1, three=1)


def test_a_step_not_in_this_environments_pipeline_is_skipped(env):
    script = Script()
    skipping = toy(
        script, script.step("one"), script.step("two", when=lambda run: False), script.step("three")
    )
    assert pipeline_advance(skipping, environment_id=env.pk) == "ready"
    assert set(rows(env)) == {"one", "three"} and script.runs["two"] == 0


def test_a_failed_step_fails_the_environment_with_its_row_and_the_records_before_it(env):
    script = Script(two=failed("two broke", detail="the detail of two"))
    assert pipeline_advance(toy(script), environment_id=env.pk) == "failed"
    stored = Environment.objects.get(pk=env.pk)
    assert (stored.status, stored.status_reason) == (Status.FAILED, "two broke")
    assert rows(env) == {
        "one": ("done", 1, "one done"),
        "two": ("failed", 1, "the detail of two"),
    }
    assert actions(env) == [
        "portal.environment.provisioning_started",
        f"{COMPLETED}:one",
        "portal.environment.failed",
    ]
    assert script.runs["three"] == 0
    assert pipeline_advance(toy(script), environment_id=env.pk) == "noop"  # FAILED is not its


def test_a_failure_of_pure_work_commits_the_entry_and_the_failure_together(env):
    """A step that does not start fails before anything was committed: the entry move, the
    records before it and the failure commit in one go, and the failure names its own actor."""
    from kiln.identity.permissions import system_actor

    script = Script(one=failed("denied", actor=system_actor("policy-gate"), data={"why": 1}))
    assert pipeline_advance(toy(script), environment_id=env.pk) == "failed"
    assert actions(env) == ["portal.environment.provisioning_started", "portal.environment.failed"]
    failure = OutboxEvent.objects.get(
        target=f"portal.environment:{env.public_id}", action="portal.environment.failed"
    )
    assert (failure.actor, failure.data["why"]) == ("system:policy-gate", 1)
    assert rows(env) == {"one": ("failed", 0, "denied")}


def test_a_raising_step_propagates_and_drops_only_what_was_not_committed(env):
    script = Script(three=RuntimeError("cluster answered 500"))
    with pytest.raises(RuntimeError, match="cluster answered 500"):
        pipeline_advance(toy(script), environment_id=env.pk)
    # Committed before three ran: the entry, one and two done (two's done with three's start).
    assert status(env) == Status.PROVISIONING
    assert rows(env) == {
        "one": ("done", 1, "one done"),
        "two": ("done", 1, "two done"),
        "three": ("running", 1, ""),
    }
    script.outcomes.clear()
    assert pipeline_advance(toy(script), environment_id=env.pk) == "ready"
    assert script.runs == Counter(one=1, two=1, three=2)
    assert Counter(actions(env))[f"{COMPLETED}:three"] == 1


def test_a_raise_before_the_first_commit_leaves_the_environment_as_it_was(env):
    script = Script(one=ValueError("bad input to composition"))
    before = actions(env)
    with pytest.raises(ValueError):
        pipeline_advance(toy(script), environment_id=env.pk)
    assert status(env) == Status.APPROVED and rows(env) == {} and actions(env) == before


class Killed(BaseException):
    """The worker dies (SIGKILL stands in): nothing after this point runs."""


@pytest.fixture
def _chain_emptied_afterwards(transactional_db):
    """The flush after a transactional test cannot TRUNCATE the chain: empty it first."""
    yield
    from tests.audit.conftest import wipe_chain

    wipe_chain()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_chain_emptied_afterwards")
def test_a_crash_just_before_a_step_is_recorded_done_is_resumed_without_duplicates(
    people, monkeypatch
):
    """Two's work is done, its record is not (the transaction dies with the worker): the next
    pass does two again and records it once, and what was committed before is not done again."""
    with tasks_held():  # committed for real here: no provisioning task may take it
        env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    real = pipeline.step_done

    def dying(**kwargs):
        if kwargs["name"] == "two":
            raise Killed
        return real(**kwargs)

    monkeypatch.setattr(pipeline, "step_done", dying)
    script = Script()
    with pytest.raises(Killed):
        pipeline_advance(toy(script), environment_id=env.pk)
    assert status(env) == Status.PROVISIONING
    assert rows(env) == {"one": ("done", 1, "one done"), "two": ("running", 1, "")}

    monkeypatch.setattr(pipeline, "step_done", real)
    assert pipeline_advance(toy(script), environment_id=env.pk) == "ready"
    assert script.runs == Counter(one=1, two=2, three=1)
    assert rows(env)["two"] == ("done", 2, "two done")
    counted = Counter(actions(env))
    assert all(counted[f"{COMPLETED}:{name}"] == 1 for name in ("one", "two", "three"))
    assert counted["portal.environment.provisioning_started"] == 1


def test_a_wait_the_pipeline_calls_overdue_becomes_its_failure(env):
    """The pipeline's `waiting` hook turns a wait into a failure (a deadline passed); here into
    FAILED with no step row marked, the stuck step left as it was to be retried."""
    script = Script(two=pending("still there", remaining=("ConfigMap x",)))

    def overdue(run, step, result):
        return failed(
            f"gave up: {result.reason}", data={"left": list(result.remaining)}, failed_step=""
        )

    assert pipeline_advance(toy(script, waiting=overdue), environment_id=env.pk) == "failed"
    stored = Environment.objects.get(pk=env.pk)
    assert (stored.status, stored.status_reason) == (Status.FAILED, "gave up: still there")
    assert rows(env)["two"] == ("running", 1, "")
    failure = OutboxEvent.objects.get(
        target=f"portal.environment:{env.public_id}", action="portal.environment.failed"
    )
    assert failure.data["left"] == ["ConfigMap x"]


def test_a_step_with_its_own_deadline_is_not_called_overdue(env):
    script = Script(two=pending("own deadline", bounded=False))

    def overdue(run, step, result):
        return failed("gave up") if result.bounded else result

    assert pipeline_advance(toy(script, waiting=overdue), environment_id=env.pk) == "pending"
    assert status(env) == Status.PROVISIONING


def test_when_another_worker_ended_it_first_the_work_before_the_last_step_is_kept(env):
    script = Script()

    def finished_elsewhere(run: Run):
        Environment.objects.filter(pk=run.environment.pk).update(status=Status.READY)
        return done("three done")

    racing = toy(
        script,
        script.step("one"),
        script.step("two", starts=False),
        Step("three", finished_elsewhere, starts=False),
    )
    assert pipeline_advance(racing, environment_id=env.pk) == "noop"
    assert rows(env) == {"one": ("done", 1, "one done"), "two": ("done", 1, "two done")}
    assert "portal.environment.readied" not in actions(env)


def test_a_repeating_pipeline_starts_its_steps_afresh_each_time_it_is_entered(env):
    script = Script()
    again = toy(script, repeats=True)
    assert pipeline_advance(again, environment_id=env.pk) == "ready"
    Environment.objects.filter(pk=env.pk).update(status=Status.APPROVED)  # entered once more
    assert pipeline_advance(again, environment_id=env.pk) == "ready"
    assert script.runs == Counter(one=2, two=2, three=2)
    assert Counter(actions(env))[f"{COMPLETED}:two"] == 2


def test_a_pipeline_that_does_not_repeat_skips_what_it_did_before(env):
    script = Script()
    assert pipeline_advance(toy(script), environment_id=env.pk) == "ready"
    Environment.objects.filter(pk=env.pk).update(status=Status.PROVISIONING)
    assert pipeline_advance(toy(script), environment_id=env.pk) == "ready"
    assert script.runs == Counter(one=1, two=1, three=1)


def test_provisioning_and_teardown_are_the_step_lists_the_pages_show():
    assert PROVISIONING.step_names == PROVISIONING_STEPS
    assert TEARDOWN.step_names == TEARDOWN_STEPS
