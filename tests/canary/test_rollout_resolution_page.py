"""The rollout page says when the latency histogram's buckets keep a rollout from promoting, and which would resolve it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

from audit.models import OutboxEvent
from canary import selectors, services
from canary.models import RolloutStatus
from canary.sequential import Window
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import PLATFORM_ADMIN, Actor
from tests.canary.test_ownership_support import own_namespace
from tests.canary.test_sequential_resolution import ISTIO_MS, bucketed

pytestmark = pytest.mark.django_db

ADMIN = Actor("root", roles=frozenset({PLATFORM_ADMIN}))


@pytest.fixture
def service():
    team = Team.objects.create(slug="payments", name="Payments")
    own_namespace("shop", "payments")
    return services.service_create(actor=ADMIN, team=team, name="checkout", namespace="shop")


def _istio_windows(rollout, tick):
    """What a Prometheus read of Istio's default buckets gives: a 60 ms body, both arms alike."""
    rng = np.random.default_rng([11, tick])
    arms = [
        Window(3000, 3, bucketed(rng.lognormal(math.log(60), 0.04, 3000), ISTIO_MS), ISTIO_MS)
        for _ in range(2)
    ]
    return arms[0], arms[1], rollout.weight


def _held_rollout(service, monkeypatch):
    # Only the metrics read (an HTTP call to Prometheus) is replaced; the analysis is real.
    monkeypatch.setattr("canary.services.analysis.read_windows", _istio_windows)
    rollout = services.rollout_create(
        actor=ADMIN,
        service=service,
        baseline_version="v1",
        canary_version="v2",
        steps=[10, 100],
        ticks_per_step=10,
        config={"max_ticks": 40},
        seed=3,
    )
    services.rollout_tick(rollout_id=rollout.pk, tick=0)
    for tick in range(1, 41):
        rollout.refresh_from_db()
        if rollout.status != RolloutStatus.RUNNING:
            break
        services.rollout_tick(rollout_id=rollout.pk, tick=tick)
    rollout.refresh_from_db()
    return rollout


def test_a_rollout_on_unresolving_buckets_is_held_and_audited_with_the_buckets(
    service, monkeypatch
):
    rollout = _held_rollout(service, monkeypatch)
    assert rollout.status == RolloutStatus.INCONCLUSIVE
    assert "buckets cannot resolve the design shift" in rollout.reason
    assert "62.5, 78.1, 97.7 ms" in rollout.reason
    median = rollout.analysis["channels"]["median"]["resolution"]
    assert median["bucket_ms"] == [50.0, 100.0] and median["resolved"] is False
    assert rollout.analysis["channels"]["median"]["held"] is True
    event = OutboxEvent.objects.filter(action="canary.rollout.inconclusive").get()
    assert event.data["statistics"]["channels"]["median"]["resolution"]["native_schema"] == 2


def test_the_rollout_page_shows_the_bucket_and_what_would_resolve_it(service, monkeypatch, client):
    rollout = _held_rollout(service, monkeypatch)
    user = get_user_model().objects.create_user("alice", password="pw-123456789")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    Membership.objects.create(user=user, team=Team.objects.get(slug="payments"))
    client.force_login(user)
    page = client.get(reverse("canary:rollout-detail", args=[rollout.pk])).content.decode()
    assert "held: buckets too wide" in page
    assert "50–100 ms bucket: can hide ×1.25" in page
    assert 'id="settle-buckets"' in page
    resolution = page.split('id="resolution"')[1].split("</ul>")[0]
    assert "the 50–100 ms bucket can hide a +25% shift" in resolution
    assert "native histograms of schema 2 or finer" in resolution
    view = selectors.rollout_analysis_view(rollout)
    cells = {r["channel"]: r["resolution"] for r in view["channels"]}
    assert cells == {
        "errors": "exact",
        "median": "50–100 ms bucket: can hide ×1.25",
        # The pooled p99.5 of a 60 ms body 4% wide is below 100 ms too.
        "tail": "50–100 ms bucket: can hide ×1.5",
    }
