"""The lifecycle demo counts what the reaper did: deferrals while checks said "not yet", forced
disruptions at the hard deadline, the owner's deferral and the refused bad ones."""

from __future__ import annotations

import pytest

from bench.portal.lifecycle_demo import lifecycle_demo

pytestmark = pytest.mark.django_db


def test_demo_counts_deferrals_and_forced_disruptions(settings):
    # max deferral 1 h, step 10 min, a reaper pass every 10 min: a refusing workload is asked
    # at expiry and every 10 min after, deferred 6 times (0, 10, ... 50 min), forced at 60.
    settings.KILN_LIFECYCLE_CLASSES = {"dev": {"max_deferral": 3600, "deferral_step": 600}}
    report = lifecycle_demo(environments=6, seed=1, port=0, pass_minutes=10)
    assert report["deleted"] == 6 and report["objects_left"] == 0
    # Every teardown waited for its tenant API server's events, and every one came.
    assert report["tenant_audit"]["teardowns_acknowledged"] == 6
    assert report["tenant_audit"]["teardowns_incomplete"] == 0
    assert report["tenant_audit"]["batches_archived"] >= 6 * 2  # the seeding and the deletions
    by = report["by_behaviour"]
    assert by["never"] == {"deferrals": 6, "forced": 1, "environments": 1, "deleted": 1}
    assert by["hold"]["deferrals"] == 6 and by["hold"]["forced"] == 1
    assert "deferrals" not in by["none"] and "deferrals" not in by["hold-without-reason"]
    assert 1 <= by["ok-after-k"]["deferrals"] <= 3 and "forced" not in by["ok-after-k"]
    assert report["deferrals_by_source"]["owner"] == 1
    assert report["bad_deferrals_refused"] == {"reason": 1, "minutes": 1}  # 61 min > 60
    assert report["forced_disruptions"] == 2
    assert report["metrics_delta"]["kiln_portal_forced_disruptions_total"] == 2
    assert report["deferrals"] == sum(report["deferrals_by_source"].values())
