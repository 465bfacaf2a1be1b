"""The simulated kube-scheduler hands the extender kube-scheduler's feasible-node sample."""

import numpy as np

from scheduler.kubedefault import num_feasible_nodes_to_find
from scheduler.simulation.kubescheduler import KubeScheduler


def test_small_clusters_send_every_feasible_node():
    scheduler = KubeScheduler(backend=None)
    ok = np.array([True, False, True, True] * 20)
    assert scheduler._sample(ok).tolist() == np.flatnonzero(ok).tolist()
    assert scheduler._sample(ok).tolist() == np.flatnonzero(ok).tolist()


def test_large_clusters_send_the_adaptive_count_from_a_rotating_start():
    scheduler = KubeScheduler(backend=None)
    ok = np.ones(1000, dtype=bool)
    ok[5] = False
    want = num_feasible_nodes_to_find(1000)
    assert want == 420
    first = scheduler._sample(ok)
    assert len(first) == want and first[0] == 0 and 5 not in first.tolist()
    assert first[-1] == want  # one node skipped: 421 checked
    second = scheduler._sample(ok)
    assert second[0] == want + 1 and len(second) == want
    third = scheduler._sample(ok)  # wraps round: 841..999, then 0..261 without node 5
    assert len(third) == want and third[0] == 2 * want + 1 and third[-1] == 261
    assert len(set(third.tolist())) == want


def test_fewer_feasible_than_wanted_sends_all_and_checks_every_node():
    scheduler = KubeScheduler(backend=None)
    ok = np.zeros(1000, dtype=bool)
    ok[[10, 990]] = True
    scheduler._next_start = 500
    assert scheduler._sample(ok).tolist() == [990, 10]
    assert scheduler._next_start == 500
