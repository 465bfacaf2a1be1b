"""Round trips on the provisioning path: bounded, and the work still done and audited."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from audit.models import OutboxEvent
from kiln.cluster.models import SimulatedObject
from kiln.cluster.simulated import SimulatedBackend
from portal.lifecycle import Status
from portal.models import Environment, PolicyDecision, ProvisioningStep
from portal.services import environment_request_submit
from portal.services.provisioning import READY, environment_provision
from portal.services.steps import step_done, step_started
from portal.services.teardown import environment_teardown
from tests.portal.conftest import drain_audit, request_data

pytestmark = pytest.mark.django_db


def _statements(captured: CaptureQueriesContext, verb: str) -> list[str]:
    return [
        q["sql"] for q in captured.captured_queries if q["sql"].lstrip().upper().startswith(verb)
    ]


def test_provisioning_to_ready_stays_within_its_query_budget(people):
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert env.status == Status.APPROVED
    with CaptureQueriesContext(connection) as captured:
        assert environment_provision(environment_id=env.pk) == READY
    env.refresh_from_db()
    assert env.status == Status.READY and env.ready_at is not None
    assert set(
        ProvisioningStep.objects.filter(environment=env, status=ProvisioningStep.DONE).values_list(
            "name", flat=True
        )
    ) == {"compose", "manifest-policy", "apply", "ready"}
    actions = list(
        OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}").values_list(
            "action", flat=True
        )
    )
    assert actions.count("portal.provisioning_step.completed") == 4
    assert actions[-1] == "portal.environment.readied"
    # Statements that reach the database (savepoints stand in for each transaction's BEGIN/COMMIT).
    real = [q["sql"] for q in captured.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert len(real) <= 28, real
    # Transactions (each a savepoint inside the test's own): the composed manifests and their
    # policy decision commit together, and steps open no savepoint of their own.
    transactions = [q for q in captured.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(transactions) <= 7, len(transactions)


def _production_transactions(monkeypatch):
    """What would be a transaction of its own outside the test's: an atomic block opened, or a
    write run, with only the test's own transaction open (depth 1). Returns the list it fills
    and the execute wrapper that sees the writes."""
    seen: list[str] = []
    real_enter = transaction.Atomic.__enter__

    def enter(self):
        if len(transaction.get_connection(self.using).atomic_blocks) == 1:
            seen.append("atomic")
        return real_enter(self)

    def writes(execute, sql, params, many, context):
        verb = sql.lstrip().split(" ", 1)[0].upper()
        if verb in ("INSERT", "UPDATE", "DELETE") and len(connection.atomic_blocks) == 1:
            seen.append(f"autocommit {sql[:60]}")
        return execute(sql, params, many, context)

    monkeypatch.setattr(transaction.Atomic, "__enter__", enter)
    return seen, writes


def test_provisioning_objects_healthy_at_once_commits_three_transactions(people, monkeypatch):
    """Start (PROVISIONING, composition, policy decision, apply running), the backend's apply,
    and the end (applied objects, apply and ready done, READY): three commits, all audited."""
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    transactions, writes = _production_transactions(monkeypatch)
    with connection.execute_wrapper(writes):
        assert environment_provision(environment_id=env.pk) == READY
    assert transactions == ["atomic"] * 3, transactions
    actions = list(
        OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions[-6:] == [
        "portal.environment.provisioning_started",
        "portal.provisioning_step.completed",
        "portal.provisioning_step.completed",
        "portal.provisioning_step.completed",
        "portal.provisioning_step.completed",
        "portal.environment.readied",
    ]


def test_a_second_provision_pass_changes_nothing(people):
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    environment_provision(environment_id=env.pk)
    before = OutboxEvent.objects.count()
    assert environment_provision(environment_id=env.pk) == "noop"
    assert OutboxEvent.objects.count() == before
    assert Environment.objects.get(pk=env.pk).status == Status.READY


def test_simulated_apply_inserts_new_objects_in_one_statement():
    manifests = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "perf-a"}},
        *(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{i}", "namespace": "perf-a"},
                "data": {"i": str(i)},
            }
            for i in range(5)
        ),
    ]
    backend = SimulatedBackend()
    with CaptureQueriesContext(connection) as captured:
        refs = backend.apply(manifests)
    assert len(_statements(captured, "INSERT")) == 1
    assert [r.name for r in refs] == ["perf-a", *(f"cm-{i}" for i in range(5))]
    stored = {o.name: o for o in SimulatedObject.objects.filter(name__in=[r.name for r in refs])}
    assert all(str(stored[r.name].uid) == r.uid and r.generation == 1 for r in refs)
    # Applying again is an update of nothing: same uids, no new rows, no inserts.
    with CaptureQueriesContext(connection) as again:
        second = backend.apply(manifests)
    assert not _statements(again, "INSERT")
    assert [r.uid for r in second] == [r.uid for r in refs]
    assert SimulatedObject.objects.filter(name__in=[r.name for r in refs]).count() == 6


def test_a_manifest_policy_denial_commits_composition_decisions_and_failure_together(
    people, settings, tmp_path
):
    import shutil

    shutil.copytree(settings.BASE_DIR / "deploy" / "policies", tmp_path / "policies")
    (tmp_path / "policies" / "manifests" / "deny-namespaces.yaml").write_text(
        """apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: deny-namespaces
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["namespaces"]
  validations:
    - expression: "object.metadata.name == 'never'"
      message: no namespaces today
"""
    )
    settings.KILN_POLICY_DIR = tmp_path / "policies"
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert environment_provision(environment_id=env.pk) == "failed"
    env.refresh_from_db()
    assert env.status == Status.FAILED
    assert "no namespaces today" in env.status_reason
    assert env.manifests  # the composition is kept with the decision on it
    steps = dict(ProvisioningStep.objects.filter(environment=env).values_list("name", "status"))
    assert steps == {"compose": ProvisioningStep.DONE, "manifest-policy": ProvisioningStep.FAILED}
    denied = PolicyDecision.objects.filter(
        environment=env, stage=PolicyDecision.MANIFEST, allowed=False
    )
    assert list(denied.values_list("policy", flat=True)) == ["deny-namespaces"]
    assert not SimulatedObject.objects.filter(namespace=env.namespace).exists()
    assert not SimulatedObject.objects.filter(kind="Namespace", name=env.namespace).exists()
    actions = list(
        OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}").values_list(
            "action", flat=True
        )
    )
    assert actions[-1] == "portal.environment.failed"
    assert actions.count("portal.provisioning_step.completed") == 1


def test_a_submission_moves_its_new_environment_without_locking_or_savepoints(people):
    """The row was inserted in the same transaction: no other transaction can see it, so its
    transitions to PENDING_APPROVAL and APPROVED neither re-read it nor open savepoints."""
    with CaptureQueriesContext(connection) as captured:
        env, created = environment_request_submit(actor=people["alice"], data=request_data())
    assert created and env.status == Status.APPROVED
    sql = [q["sql"] for q in captured.captured_queries]
    assert not [q for q in sql if "FOR UPDATE" in q], sql
    # The test's own transaction makes the submission's atomic block one savepoint.
    assert len([q for q in sql if q.startswith("SAVEPOINT")]) == 1, sql
    assert len(sql) <= 16, sql
    actions = list(
        OutboxEvent.objects.filter(target=f"portal.environment:{env.public_id}").values_list(
            "action", flat=True
        )
    )
    assert actions == [
        "portal.environment.submitted",
        "portal.environment.queued_for_approval",
        "portal.environment.approved",
    ]


@pytest.mark.django_db(transaction=True)
def test_created_in_this_transaction_refuses_to_run_outside_a_transaction(people):
    from portal.services.lifecycle import environment_transition

    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    env.refresh_from_db()
    before = (env.status, OutboxEvent.objects.count())
    assert not connection.in_atomic_block
    with pytest.raises(RuntimeError, match="creating transaction"):
        environment_transition(
            actor=people["alice"],
            environment=env,
            to=Status.PROVISIONING,
            created_in_this_transaction=True,
        )
    env.refresh_from_db()
    assert (env.status, OutboxEvent.objects.count()) == before


def _actions_of(env: Environment, action: str) -> list[dict]:
    return list(
        OutboxEvent.objects.filter(
            target=f"portal.environment:{env.public_id}", action=action
        ).values_list("data", flat=True)
    )


def test_a_step_is_started_and_done_in_one_statement_each(people):
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    for _ in range(2):  # a retry counts an attempt on the same row
        with CaptureQueriesContext(connection) as captured:
            step_started(environment=env, name="cordon")
        assert len(captured.captured_queries) == 1, captured.captured_queries
    step = ProvisioningStep.objects.get(environment=env, name="cordon")
    assert (step.status, step.attempts, step.position) == (ProvisioningStep.RUNNING, 2, 10)
    started_at = step.started_at

    with CaptureQueriesContext(connection) as captured:
        assert step_done(actor=people["alice"], environment=env, name="cordon", detail="2 objects")
    steps = [q for q in captured.captured_queries if "portal_provisioningstep" in q["sql"]]
    assert len(steps) == 1 and steps[0]["sql"].startswith("INSERT"), steps
    step.refresh_from_db()
    assert (step.status, step.attempts, step.detail) == (ProvisioningStep.DONE, 2, "2 objects")
    assert step.started_at == started_at and step.finished_at >= started_at

    # Done is final: neither a second done nor a late start writes or audits anything.
    assert not step_done(actor=people["alice"], environment=env, name="cordon", detail="again")
    step_started(environment=env, name="cordon")
    step.refresh_from_db()
    assert (step.status, step.attempts, step.detail) == (ProvisioningStep.DONE, 2, "2 objects")
    completed = _actions_of(env, "portal.provisioning_step.completed")
    assert [(d["step"], d["attempts"]) for d in completed] == [("cordon", 2)]


def test_a_step_done_in_one_go_is_inserted_finished(people):
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert step_done(actor=people["alice"], environment=env, name="compose", detail="9 objects")
    step = ProvisioningStep.objects.get(environment=env, name="compose")
    assert (step.status, step.attempts) == (ProvisioningStep.DONE, 1)
    assert step.started_at == step.finished_at
    assert _actions_of(env, "portal.provisioning_step.completed")[0]["attempts"] == 1


def test_a_teardown_stays_within_its_query_budget(people, settings):
    settings.KILN_SIM_FINALIZER_SECONDS = 0.0
    env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    assert environment_provision(environment_id=env.pk) == READY
    Environment.objects.filter(pk=env.pk).update(status=Status.TEARING_DOWN)
    with CaptureQueriesContext(connection) as first:
        # The workloads are gone at once; the pass then waits for its event in the chain.
        assert environment_teardown(environment_id=env.pk) == "pending"
    drain_audit()
    with CaptureQueriesContext(connection) as second:
        assert environment_teardown(environment_id=env.pk) == "deleted"
    # Seven steps, each started and done in one statement (four statements a step before), and
    # the running workloads listed with one reconcile and one read (a reconcile and a read per
    # kind before: 74 statements in all); drain-nodes adds its start, its done and one list of
    # the environment's nodes (62 before it).
    assert len(first.captured_queries) + len(second.captured_queries) <= 65, (
        len(first.captured_queries),
        len(second.captured_queries),
    )
    assert Environment.objects.get(pk=env.pk).status == Status.DELETED
    done = ProvisioningStep.objects.filter(environment=env, status=ProvisioningStep.DONE)
    assert list(
        done.filter(position__gte=10).order_by("position").values_list("name", "attempts")
    ) == [
        ("cordon", 1),
        ("delete-workloads", 1),
        ("drain-nodes", 1),
        ("finalizers-cleared", 1),
        ("tenant-audit-acknowledged", 1),
        ("audit-confirmed", 2),  # started again by the second pass
        ("delete-namespace", 1),
    ]
