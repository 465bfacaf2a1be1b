# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""chaos_lever_bench, small: forked controllers hold faults on two teams' namespaces, the
platform lever is engaged, and every fault is reverted and confirmed, by the controllers when
they run and by the reaper process when every controller was SIGKILLed first."""

from __future__ import annotations

import pytest

from bench.chaos import levers
from bench.chaos.harness import reaper_running
from canary.chaos.models import ChaosLever
from tests.chaos.test_chaos_support import backend, chaos_settings  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_both_modes_revert_and_confirm_every_fault(backend, chaos_settings):
    # Live controllers revert on the lever's notice. The reaper runs as in the benchmark, but
    # after its first pass (made before any fault exists) its next is an hour away, so it cannot
    # take a fault the controllers were to revert (at a 0.25 s period the two raced, and on a
    # loaded machine the reaper took all four). It stops at once when the block ends.
    with reaper_running(lease=4.0, reaper_period=3600.0):
        live = levers.run_once("live", backend=backend, teams=2, experiments=4, timeout=120)
    with reaper_running(lease=4.0, reaper_period=0.25):
        killed = levers.run_once(
            "controllers_killed", backend=backend, teams=2, experiments=4, timeout=120
        )
    results = [live, killed]
    assert [r.mode for r in results] == list(levers.MODES)
    assert live.injected == killed.injected == 4
    assert live.confirmed == live.seen_gone == 4
    assert killed.confirmed == killed.seen_gone == 4
    assert live.reverted_by == {"chaos-controller": 4}
    # Killed controllers revert nothing: the reaper does it all, within the lease bound.
    assert killed.reverted_by == {"chaos-reaper": 4}
    assert killed.last_s is not None and killed.last_s < 4.0 + 0.25 + 1.0
    report = levers.summarize(results, lease=4.0, reaper_period=0.25)
    assert report["experiments"] == 4 and report["confirmed_reverted"] == 8
    assert report["live"]["median_s"] == live.last_s
    assert report["controllers_killed"]["max_s"] == killed.last_s
    assert levers.experiments_left() == 0
    assert not ChaosLever.objects.get(scope="platform").engaged  # released after each run
