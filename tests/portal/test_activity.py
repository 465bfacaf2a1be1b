"""The team's own changes in its namespace are activity: managedFields read from the objects,
Kiln's and the controllers' writes left out, and an idle proposal withdrawn when one is seen."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.models import OutboxEvent
from kiln.cluster.simulated import SimulatedBackend
from portal import activity
from portal.lifecycle import Status
from portal.models import Environment
from portal.services import environments_reap_expired
from tests.portal.conftest import request_data


def obj(*entries: dict) -> dict:
    return {"metadata": {"name": "x", "managedFields": list(entries)}}


def entry(manager: str, time: str, **extra) -> dict:
    return {"manager": manager, "operation": "Apply", "time": time, **extra}


def test_the_latest_change_by_a_team_manager():
    objects = [
        obj(entry("kubectl-client-side-apply", "2026-01-01T10:00:00Z")),
        obj(entry("helm", "2026-01-01T11:00:00Z"), entry("kiln", "2026-01-01T12:00:00Z")),
        obj(entry("kube-controller-manager", "2026-01-01T13:00:00Z")),
        obj(entry("kubectl", "2026-01-01T14:00:00Z", subresource="status")),
    ]
    assert activity.latest_team_change(objects) == datetime(2026, 1, 1, 11, tzinfo=UTC)


@pytest.mark.parametrize(
    "manager", ["kiln", "kiln-demo", "kiln-chaos", "argocd-controller", "karpenter", "kubelet", ""]
)
def test_kilns_own_writes_and_the_controllers_are_not_activity(manager):
    assert activity.latest_team_change([obj(entry(manager, "2026-01-01T10:00:00Z"))]) is None


# Whatever an API server (or a hostile tenant) puts in managedFields, the reading never raises
# and answers None or an aware time.
scalar = st.none() | st.booleans() | st.integers() | st.text(max_size=25)
times = scalar | st.sampled_from(
    ["2026-01-01T10:00:00Z", "2026-01-01T10:00:00", "2026-13-01T00:00:00Z"]
)
entries = (
    scalar
    | st.lists(scalar, max_size=2)
    | st.fixed_dictionaries(
        {"manager": scalar | st.sampled_from(["kubectl", "kiln", "helm"]), "time": times},
        optional={"subresource": scalar},
    )
)
metadata = st.fixed_dictionaries({"managedFields": scalar | st.lists(entries, max_size=4)})


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries({"metadata": metadata})
        | st.dictionaries(st.text(max_size=5), scalar, max_size=2),
        max_size=4,
    )
)
def test_malformed_managed_fields_are_evidence_of_nothing(objects):
    seen = activity.latest_team_change(objects)
    assert seen is None or seen.tzinfo is not None


@pytest.mark.django_db
def test_a_change_in_the_namespace_withdraws_the_idle_proposal(
    people, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        from portal.services import environment_request_submit

        env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    env.refresh_from_db()
    assert env.status == Status.READY, env.status_reason
    # Ready an hour ago (the API server stamps managedFields to the second, so a change made
    # within the same second as READY could not be told apart from it).
    ready = env.ready_at - timedelta(hours=1)
    Environment.objects.filter(pk=env.pk).update(
        ready_at=ready, expires_at=ready + timedelta(days=10)
    )
    env.refresh_from_db()
    later = env.ready_at + timedelta(hours=49)  # dev: idle after 48 h
    # Kiln's own delivery and the controllers do not count: proposed.
    assert environments_reap_expired(now=later)["idle_proposed"] == [env.public_id]
    environments_reap_expired(now=later, dry_run=False)
    env.refresh_from_db()
    proposed = env.idle_proposed_at
    assert proposed is not None
    # The team applies a ConfigMap after the proposal (the simulated API server stamps it now,
    # so the sweep's clock is moved past it).
    SimulatedBackend().apply(
        [{"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "settings", "namespace": env.namespace}, "data": {"a": "1"}}],
        field_manager="kubectl-client-side-apply",
    )  # fmt: skip
    cm = SimulatedBackend().get("v1", "ConfigMap", env.namespace, "settings")
    applied = activity.latest_team_change([cm])
    assert applied is not None
    Environment.objects.filter(pk=env.pk).update(idle_proposed_at=applied - timedelta(minutes=1))
    sweep = applied + timedelta(hours=3)  # past the proposal's grace: it would lapse
    report = environments_reap_expired(now=sweep, dry_run=False)
    assert report["idle_expired"] == [] and report["idle_proposed"] == []
    env.refresh_from_db()
    assert env.idle_proposed_at is None and env.last_activity_at == applied
    assert env.expires_at == env.ready_at + timedelta(days=10)  # not brought forward
    (seen,) = OutboxEvent.objects.filter(action="portal.environment.activity_seen")
    assert seen.data["idle_proposal_withdrawn"] is True and seen.data["source"] == "namespace"
    # Seen once: the next pass records nothing new.
    environments_reap_expired(now=sweep + timedelta(minutes=5), dry_run=False)
    assert OutboxEvent.objects.filter(action="portal.environment.activity_seen").count() == 1
