"""Demo seed is idempotent; the reap command dry-runs until --for-real."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from kiln.seed import seed_demo
from portal.models import Environment

pytestmark = pytest.mark.django_db


def test_seed_creates_each_state_once():
    created = seed_demo()
    assert any("payments-checkout-preview" in c for c in created)
    statuses = dict(Environment.objects.values_list("name", "status"))
    assert statuses["ranker-prod"] == "PENDING_APPROVAL"
    assert statuses["spot-staging"] == "DENIED"
    assert statuses["checkout-preview"] == "APPROVED"
    assert not [c for c in seed_demo() if c.startswith("environment")]
    assert Environment.objects.count() == 5


def test_reap_command_dry_runs_until_for_real(people, django_capture_on_commit_callbacks):
    from portal.services import environment_request_submit
    from tests.portal.conftest import request_data

    with django_capture_on_commit_callbacks(execute=True):
        env, _ = environment_request_submit(actor=people["alice"], data=request_data())
    Environment.objects.filter(pk=env.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    out = StringIO()
    call_command("reap_expired", stdout=out)
    assert json.loads(out.getvalue())["expired"] == [env.public_id]
    env.refresh_from_db()
    assert env.status == "READY"
    out = StringIO()
    call_command("reap_expired", "--for-real", stdout=out)
    assert json.loads(out.getvalue())["dry_run"] is False
    env.refresh_from_db()
    assert env.status == "EXPIRING"
