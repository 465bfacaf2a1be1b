# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""No cluster call under a row lock in chaos: defining an experiment, injecting a fault under
its lease, reverting it, aborting, a lever and every reaper pass read and write the cluster
outside any transaction (DESIGN.md), so a slow API server holds no lease or experiment row.

Transactional (real commits): `connection.in_atomic_block` is True only inside a transaction
the code under test opened."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from canary.chaos.models import ChaosInjection, ChaosLease
from canary.chaos.reaper import chaos_reap
from canary.chaos.services import (
    backend as backend_module,
)
from canary.chaos.services import (
    experiment_abort,
    experiment_create,
    fault_inject,
    fault_lease_acquire,
    fault_revert,
    lever_engage,
)
from kiln.identity.permissions import system_actor
from tests.chaos.test_chaos_support import (  # noqa: F401
    abort_data,
    admin,
    backend,
    chaos_settings,
    engineer,
    shop,
    stray_fault,
)
from tests.support.outside_transactions import OutsideTransactions

pytestmark = pytest.mark.django_db(transaction=True)


def test_no_chaos_path_calls_the_cluster_inside_a_transaction(
    engineer, admin, shop, backend, monkeypatch
):
    calls: Counter[str] = Counter()
    guarded = OutsideTransactions(backend, calls)
    # Paths that take no backend argument reach the configured one through this module.
    monkeypatch.setattr(backend_module, "get_backend", lambda: guarded)

    # Defined, injected under the lease, reverted by its controller.
    first = experiment_create(
        actor=engineer, data=abort_data(name="one", may_overlap=True), backend=guarded
    )
    term = fault_lease_acquire(experiment_id=first.pk, holder="a")
    injection = fault_inject(experiment_id=first.pk, holder="a", term=term, backend=guarded)
    assert fault_revert(
        injection_id=injection.pk,
        actor=system_actor("chaos-controller"),
        reason="done",
        backend=guarded,
    )
    experiment_abort(actor=engineer, experiment=first, backend=guarded)

    # Aborted by hand while its fault is live: reverted at once.
    second = experiment_create(
        actor=engineer, data=abort_data(name="two", may_overlap=True), backend=guarded
    )
    fault_lease_acquire(experiment_id=second.pk, holder="a")
    live = fault_inject(experiment_id=second.pk, holder="a", term=1, backend=guarded)
    experiment_abort(actor=engineer, experiment=second, reason="enough", backend=guarded)
    live.refresh_from_db()
    assert live.reverted_at is not None

    # Its lease lapses: the reaper reverts it; a lost holder's late write is swept.
    third = experiment_create(
        actor=engineer, data=abort_data(name="three", may_overlap=True), backend=guarded
    )
    fault_lease_acquire(experiment_id=third.pk, holder="a")
    lapsed = fault_inject(experiment_id=third.pk, holder="a", term=1, backend=guarded)
    stray = stray_fault(third.pk)
    backend.apply([stray])
    renewed = ChaosLease.objects.get(pk=third.pk).renewed_at
    result = chaos_reap(backend=guarded, now=renewed + timedelta(seconds=1.0))
    assert result.reverted == [lapsed.pk]
    assert [s["name"] for s in result.strays] == [stray["metadata"]["name"]]

    # Past its hard maximum: ended and reverted by the reaper.
    fourth = experiment_create(
        actor=engineer, data=abort_data(name="four", may_overlap=True), backend=guarded
    )
    fault_lease_acquire(experiment_id=fourth.pk, holder="a")
    overdue = fault_inject(experiment_id=fourth.pk, holder="a", term=1, backend=guarded)
    result = chaos_reap(backend=guarded, now=timezone.now() + timedelta(seconds=121))
    assert str(fourth.pk) in result.ended and overdue.pk in result.reverted

    # The platform lever stops a running experiment; the reaper takes its fault back.
    fifth = experiment_create(
        actor=engineer, data=abort_data(name="five", may_overlap=True), backend=guarded
    )
    fault_lease_acquire(experiment_id=fifth.pk, holder="a")
    stopped = fault_inject(experiment_id=fifth.pk, holder="a", term=1, backend=guarded)
    lever_engage(actor=admin, reason="incident")
    assert stopped.pk in chaos_reap().reverted  # through the configured backend

    assert not ChaosInjection.objects.filter(reverted_at__isnull=True).exists()
    # Every kind of cluster call these paths make was seen, and checked.
    for name in ("get", "list", "apply", "delete"):
        assert calls[name] > 0, (name, calls)
