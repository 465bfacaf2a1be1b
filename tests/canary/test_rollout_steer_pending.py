"""A pending rollout's page already carries its Decide card, hidden, so the card can show the
moment the rollout runs (static/canary/rollout.js) without a reload; a finished one has none."""

from __future__ import annotations

import re

import pytest

from canary import services
from tests.canary.test_rollout_pages import ADMIN, alice, service  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


def _steer(html: str) -> str | None:
    found = re.search(r'<section class="card" id="steer"([^>]*)>(.*?)</section>', html, re.S)
    return (found[1] + found[2]) if found else None


def test_a_pending_rollouts_page_holds_its_decide_card_hidden(alice, service):  # noqa: F811
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )
    assert rollout.status == "pending"
    steer = _steer(alice.get(f"/rollouts/{rollout.pk}/").content.decode())
    assert steer is not None and steer.startswith(" hidden")
    assert 'value="abort"' in steer


def test_a_finished_rollouts_page_has_no_decide_card(alice, service):  # noqa: F811
    rollout = services.rollout_create(
        actor=ADMIN, service=service, baseline_version="v1", canary_version="v2"
    )
    services.rollout_abort(actor=ADMIN, rollout=rollout, reason="not today")
    assert _steer(alice.get(f"/rollouts/{rollout.pk}/").content.decode()) is None
