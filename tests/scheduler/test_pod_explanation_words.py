"""A pod's placement in sentences on the scheduler page (`kiln.dev/score-explanation`)."""

from __future__ import annotations

from django.urls import reverse

from kiln.identity.models import Team
from scheduler.cluster_reads import explanation_words
from tests.portal.test_pages import login

PLACED = {
    "node": "ip-a",
    "score": 87,
    "workloadClass": "batch",
    "capacityType": "spot",
    "hourly": 0.042,
    "candidates": 6,
    "feasibleNodes": 4,
    "passedExtender": 3,
    "extenderRejected": {"latency-sensitive pod on spot": 1},
    "defaultFilterRejected": {"Insufficient cpu": 2},
    "top": [{"node": "ip-a", "score": 87}, {"node": "ip-b", "score": 80}],
    "nodeCacheCapable": True,
}


def test_a_placement_reads_as_sentences():
    assert explanation_words(PLACED) == [
        "Placed on ip-a (score 87): a batch pod on spot capacity, $0.042/h.",
        "6 nodes considered: 4 fit it, 3 passed Kiln's filter.",
        "Kiln's filter turned away: 1 latency-sensitive pod on spot.",
        "kube-scheduler's filters turned away: 2 Insufficient cpu.",
        "Best scores: ip-a 87, ip-b 80.",
    ]


def test_what_is_missing_is_left_out_and_what_is_not_a_placement_says_nothing():
    assert explanation_words({"node": "ip-a", "score": 5}) == ["Placed on ip-a (score 5)."]
    for other in (None, [], "text", {"score": 3}, {"node": ""}):
        assert explanation_words(other) == []
    # Whatever else a pod's annotation holds, the page does not fail on it.
    for odd in (1, True, 1.5, "x", {"a": 1}, [1]):
        for key in ("top", "terms", "extenderRejected", "defaultFilterRejected", "candidates"):
            assert explanation_words({"node": "ip-a", key: odd})[0].startswith("Placed on ip-a")


def test_the_scheduler_page_says_why_a_pod_is_where_it_is(cluster):
    payments = Team.objects.get_or_create(slug="payments", defaults={"name": "Payments"})[0]
    alice = login("alice", "engineer", payments)
    page = alice.get(reverse("scheduler:overview")).content.decode()
    nodes = page[page.index('id="nodes"') :]
    assert "<li>Placed on ip-pay (score 8).</li>" in nodes
    assert "<li>Terms: cost 0.9, packing 0.5, risk 0.98.</li>" in nodes
    assert "<summary>As JSON</summary>" in nodes
