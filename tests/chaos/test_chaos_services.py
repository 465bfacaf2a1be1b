# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""Chaos services against the real database and the simulated cluster: create, lease CAS, inject, revert, reap."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from canary.chaos import actuators
from canary.chaos.models import ChaosExperiment, ChaosInjection, ChaosLease
from canary.chaos.reaper import chaos_reap
from canary.chaos.services import (
    ChaosInvalid,
    LeaseNotHeld,
    experiment_abort,
    experiment_create,
    experiment_errors,
    fault_inject,
    fault_lease_acquire,
    fault_lease_release,
    fault_lease_renew,
    fault_revert,
)
from canary.chaos.services.experiments import NOT_IN_CLUSTER
from kiln.errors import Conflict, Forbidden, IllegalTransition
from kiln.identity.permissions import ENGINEER, Actor, system_actor
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    admin,
    audit_actions,
    backend,
    chaos_settings,
    engineer,
    shop,
    stray_fault,
)

pytestmark = pytest.mark.django_db


def _live_vs(backend, injection: ChaosInjection) -> dict | None:
    ref = injection.applied[0]
    return backend.get(ref["apiVersion"], ref["kind"], ref["namespace"], ref["name"])


def test_create_stores_experiment_lease_and_audits(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    exp.refresh_from_db()
    assert exp.status == "running" and exp.team.slug == "payments"
    assert exp.lease_duration == 1.0 and exp.renew_deadline == 0.4
    assert ChaosLease.objects.get(pk=exp.pk).holder == ""
    assert audit_actions() == ["chaos.experiment.created", "chaos.experiment.started"]


@pytest.mark.parametrize(
    "over,field",
    [
        ({"selector": {}}, "selector"),
        ({"max_pods": None, "max_percent": None}, "blast_radius"),
        ({"max_duration_seconds": 30}, "max_duration_seconds"),
        ({"fault": "disk-fill"}, "fault"),
        ({"service": ""}, "service"),
        ({"abort_http_status": 200}, "abort_http_status"),
        ({"fault": "http-delay", "delay_ms": 0}, "delay_ms"),
        ({"stop_conditions": [{"kind": "error-rate-above"}]}, "stop_conditions[0]"),
        ({"namespace": "Not_A_Label"}, "namespace"),
        ({"selector": {"app": "=web;;"}}, "selector"),  # typed as app==web;;
        ({"selector": {"-app": "web"}}, "selector"),
        ({"selector": {"Bad_Prefix/app": "web"}}, "selector"),
        (
            {
                "fault": "pod-kill",
                "service": "",
                "stop_conditions": [{"kind": "error-rate-above", "threshold": 0.05}],
            },
            "stop_conditions[0]",
        ),
    ],
    ids=[
        "empty-selector",
        "no-blast-radius",
        "hard-max-below-duration",
        "unknown-fault",
        "http-without-service",
        "abort-2xx",
        "zero-delay",
        "condition-without-threshold",
        "bad-namespace",
        "selector-value-not-a-label",
        "selector-key-not-a-label",
        "selector-prefix-not-a-subdomain",
        "error-rate-condition-without-a-service",
    ],
)
def test_invalid_experiment_is_refused_and_changes_nothing(engineer, shop, backend, over, field):
    with pytest.raises(ChaosInvalid) as err:
        experiment_create(actor=engineer, data=abort_data(**over), backend=backend)
    assert field in err.value.extra["fields"]
    assert ChaosExperiment.objects.count() == 0 and audit_actions() == []


def test_engineer_of_another_team_is_refused(shop, backend):
    outsider = Actor(username="bob", roles=frozenset({ENGINEER}), teams=frozenset({"search"}))
    with pytest.raises(Forbidden):
        experiment_create(actor=outsider, data=abort_data(), backend=backend)
    assert ChaosExperiment.objects.count() == 0


def test_unknown_namespace_is_refused(engineer, shop, backend):
    with pytest.raises(ChaosInvalid):
        experiment_create(actor=engineer, data=abort_data(namespace="nowhere"), backend=backend)
    assert ChaosExperiment.objects.count() == 0


def test_lease_cas_gives_one_holder_and_a_new_term_only_after_expiry(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    now = timezone.now()
    assert fault_lease_acquire(experiment_id=exp.pk, holder="a", now=now) == 1
    # b may not take it while a's lease runs (nor within duration + skew).
    assert (
        fault_lease_acquire(experiment_id=exp.pk, holder="b", now=now + timedelta(seconds=1.05))
        is None
    )
    assert fault_lease_renew(experiment_id=exp.pk, holder="a", term=1)
    lease = ChaosLease.objects.get(pk=exp.pk)
    assert lease.holder == "a" and lease.renewals == 1
    later = lease.renewed_at + timedelta(seconds=1.11)  # duration 1.0 + skew 0.1 passed
    assert fault_lease_acquire(experiment_id=exp.pk, holder="b", now=later) == 2
    assert not fault_lease_renew(experiment_id=exp.pk, holder="a", term=1)
    assert not fault_lease_release(experiment_id=exp.pk, holder="a", term=1)
    assert ChaosLease.objects.get(pk=exp.pk).holder == "b"


def test_stale_read_loses_the_compare_and_swap(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    lease = ChaosLease.objects.get(pk=exp.pk)
    assert fault_lease_acquire(experiment_id=exp.pk, holder="a") == 1
    # A writer that read the old resourceVersion cannot overwrite.
    assert (
        ChaosLease.objects.filter(pk=exp.pk, resource_version=lease.resource_version).update(
            holder="b"
        )
        == 0
    )
    assert ChaosLease.objects.get(pk=exp.pk).holder == "a"


def test_inject_applies_a_valid_virtual_service_and_revert_removes_it(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    term = fault_lease_acquire(experiment_id=exp.pk, holder="a")
    inj = fault_inject(experiment_id=exp.pk, holder="a", term=term, backend=backend)
    assert inj.state == "active" and inj.fencing_token == term
    vs = _live_vs(backend, inj)
    fault = vs["spec"]["http"][0]["fault"]["abort"]
    assert fault == {"httpStatus": 503, "percentage": {"value": 25.0}}  # capped by max_percent
    assert vs["metadata"]["labels"][actuators.LABEL_TOKEN] == str(term)
    # Idempotent for the same holder and term.
    assert fault_inject(experiment_id=exp.pk, holder="a", term=term, backend=backend).pk == inj.pk
    assert fault_revert(
        injection_id=inj.pk, actor=system_actor("chaos-controller"), reason="done", backend=backend
    )
    assert not fault_revert(
        injection_id=inj.pk, actor=system_actor("chaos-controller"), reason="again", backend=backend
    )
    assert not actuators.in_effect(backend, inj.applied)
    assert audit_actions().count("chaos.fault.reverted") == 1


def test_inject_without_the_lease_is_refused(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    fault_lease_acquire(experiment_id=exp.pk, holder="a")
    with pytest.raises(LeaseNotHeld):
        fault_inject(experiment_id=exp.pk, holder="b", term=1, backend=backend)
    assert ChaosInjection.objects.count() == 0


def test_two_live_injections_are_impossible(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    fault_lease_acquire(experiment_id=exp.pk, holder="a")
    fault_inject(experiment_id=exp.pk, holder="a", term=1, backend=backend)
    # b takes a lapsed lease but a's fault is not reverted yet: b must not inject on top.
    lease = ChaosLease.objects.get(pk=exp.pk)
    assert (
        fault_lease_acquire(
            experiment_id=exp.pk, holder="b", now=lease.renewed_at + timedelta(seconds=2)
        )
        == 2
    )
    with pytest.raises(Conflict):
        fault_inject(experiment_id=exp.pk, holder="b", term=2, backend=backend)
    assert ChaosInjection.objects.filter(reverted_at__isnull=True).count() == 1


def test_pod_kill_respects_blast_radius_and_sets_hard_maximum(engineer, shop, backend):
    exp = experiment_create(
        actor=engineer,
        data=abort_data(fault="pod-kill", max_pods=3, max_percent=50.0),
        backend=backend,
    )
    fault_lease_acquire(experiment_id=exp.pk, holder="a")
    inj = fault_inject(experiment_id=exp.pk, holder="a", term=1, backend=backend)
    chaos = _live_vs(backend, inj)
    assert chaos["kind"] == "PodChaos"
    assert chaos["spec"]["mode"] == "fixed" and chaos["spec"]["value"] == "2"  # min(3, 50% of 4)
    assert chaos["spec"]["duration"] == "120s"
    assert len(inj.targets) == 2
    live_pods = [
        p
        for p in backend.list("v1", "Pod", "shop", "app=web")
        if not p["metadata"].get("deletionTimestamp")
    ]
    assert len(live_pods) == 2


def test_reaper_reverts_lapsed_lease_and_is_idempotent(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    fault_lease_acquire(experiment_id=exp.pk, holder="a")
    inj = fault_inject(experiment_id=exp.pk, holder="a", term=1, backend=backend)
    lease = ChaosLease.objects.get(pk=exp.pk)
    # Half a second after the renewal, not the wall clock's now: with the test's timings the
    # reaper reverts 0.6 s after a renewal (reap_after), which a loaded machine could pass
    # before this line.
    held = lease.renewed_at + timedelta(seconds=0.5)
    assert chaos_reap(backend=backend, now=held).reverted == []  # still held
    later = lease.renewed_at + timedelta(seconds=1.0)
    assert chaos_reap(backend=backend, now=later).reverted == [inj.pk]
    assert chaos_reap(backend=backend, now=later).reverted == []
    inj.refresh_from_db()
    assert inj.reverted_by == "system:chaos-reaper" and inj.revert_reason == "lease lapsed"
    assert not actuators.in_effect(backend, inj.applied)


def test_reaper_sweeps_a_lost_holders_late_write(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    spec_obj = stray_fault(exp.pk)
    backend.apply([spec_obj])  # a write with a term that has no live injection
    result = chaos_reap(backend=backend)
    assert [s["name"] for s in result.strays] == [spec_obj["metadata"]["name"]]
    assert not actuators.in_effect(backend, result.strays)


def test_reaper_expires_experiments_past_their_hard_maximum(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    fault_lease_acquire(experiment_id=exp.pk, holder="a")
    inj = fault_inject(experiment_id=exp.pk, holder="a", term=1, backend=backend)
    result = chaos_reap(backend=backend, now=timezone.now() + timedelta(seconds=121))
    exp.refresh_from_db()
    inj.refresh_from_db()
    assert exp.status == "expired" and inj.reverted_at is not None
    assert str(exp.pk) in result.ended and "chaos.experiment.expired" in audit_actions()


def test_abort_reverts_now_and_is_audited(engineer, shop, backend):
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    fault_lease_acquire(experiment_id=exp.pk, holder="a")
    inj = fault_inject(experiment_id=exp.pk, holder="a", term=1, backend=backend)
    experiment_abort(actor=engineer, experiment=exp, reason="enough", backend=backend)
    inj.refresh_from_db()
    assert exp.status == "aborted" and inj.reverted_at is not None
    assert not actuators.in_effect(backend, inj.applied)
    assert audit_actions()[-2:] == ["chaos.experiment.aborted", "chaos.fault.reverted"]
    with pytest.raises(IllegalTransition):
        experiment_abort(actor=engineer, experiment=exp, backend=backend)
    with pytest.raises(IllegalTransition):
        fault_inject(experiment_id=exp.pk, holder="a", term=1, backend=backend)


def test_a_namespace_unknown_to_the_cluster_is_owned_by_its_live_environments_team(
    engineer, shop, backend
):
    from canary.models import Service
    from canary.ownership import namespace_owner
    from kiln.identity.models import Team
    from tests.canary.test_ownership_support import environment_in, own_namespace

    environment_in("payments-prod", "payments", status="PROVISIONING")
    data = abort_data(namespace="payments-prod", service="checkout")
    # The team owns it from the request on, but a fault needs the pods of a namespace the
    # cluster has: refused, naming why, until the environment is provisioned.
    assert namespace_owner("payments-prod", backend) == "payments"
    with pytest.raises(ChaosInvalid, match="not in the cluster yet") as refused:
        experiment_create(actor=engineer, data=data, backend=backend)
    assert "namespace" in refused.value.extra["fields"]
    assert experiment_errors(actor=engineer, data=data, backend=backend)["namespace"] == (
        NOT_IN_CLUSTER
    )
    assert not ChaosExperiment.objects.filter(namespace="payments-prod").exists()
    own_namespace("payments-prod", "payments", backend)
    exp = experiment_create(actor=engineer, data=data, backend=backend)
    assert exp.team.slug == "payments"
    assert exp.service == "checkout.payments-prod.svc.cluster.local"
    # A canary service row confers no ownership (it is what ownership guards), nor does a
    # deleted environment.
    Service.objects.create(
        team=Team.objects.get(slug="payments"),
        name="search-api",
        namespace="search-prod",
        host="search-api",
    )
    environment_in("search-old", "payments", status="DELETED")
    for namespace in ("search-prod", "search-old"):
        with pytest.raises(ChaosInvalid):
            experiment_create(
                actor=engineer,
                data=abort_data(namespace=namespace, service="search-api"),
                backend=backend,
            )
    environment_in("search-ranker", "search")
    with pytest.raises(Forbidden):
        experiment_create(
            actor=engineer,
            data=abort_data(namespace="search-ranker", service="ranker"),
            backend=backend,
        )


@pytest.mark.django_db(
    transaction=True
)  # the command manages its own connection, as a process does
def test_reaper_command_and_beat_task_revert_a_lapsed_fault(engineer, shop, backend, settings):
    import json
    from io import StringIO

    from django.core.management import call_command

    from canary.chaos.tasks import chaos_reap as chaos_reap_task

    assert settings.CELERY_BEAT_SCHEDULE["chaos-reaper"]["task"] == chaos_reap_task.name
    exp = experiment_create(actor=engineer, data=abort_data(), backend=backend)
    old = timezone.now() - timedelta(seconds=5)
    fault_lease_acquire(experiment_id=exp.pk, holder="a", now=old)
    inj = fault_inject(experiment_id=exp.pk, holder="a", term=1, backend=backend)
    out = StringIO()
    handlers = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    call_command("chaos_reaper", "--once", "--dry-run", stdout=out)
    # A one-shot pass leaves the process's signal handling as it found it (a forked pool in the
    # same process must still be stoppable with SIGTERM).
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
    assert json.loads(out.getvalue())["reverted"] == [inj.pk]
    inj.refresh_from_db()
    assert inj.reverted_at is None  # a dry run changes nothing
    assert chaos_reap_task.run()["reverted"] == [inj.pk]
    out = StringIO()
    call_command("chaos_reaper", "--once", stdout=out)
    assert json.loads(out.getvalue())["reverted"] == []
    assert not actuators.in_effect(backend, ChaosInjection.objects.get(pk=inj.pk).applied)
