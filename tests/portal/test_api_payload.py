"""The environment API renders with plain functions; they must answer exactly what the typed
serializers that the OpenAPI document is made from would render."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from rest_framework.renderers import JSONRenderer

from kiln.identity.models import Team
from portal import api_schema as out
from portal.models import Environment

pytestmark = pytest.mark.django_db
URL = "/api/v1/environments/"


def _json(value) -> object:
    return json.loads(JSONRenderer().render(value))


@pytest.fixture
def environments(api_client_for, django_capture_on_commit_callbacks):
    Team.objects.create(slug="payments", name="Payments")
    alice = api_client_for("engineer", sub="alice", team="payments")
    carol = api_client_for("approver", sub="carol", team="payments")
    body = {"team": "payments", "ttl_hours": 48, "cpu": 2, "memory_gib": 4}
    with django_capture_on_commit_callbacks(execute=True):
        staged = alice.post(URL, {**body, "name": "staged", "env_class": "staging"}, format="json")
        carol.post(f"{URL}{staged.json()['id']}/approve/", {"reason": "fine"}, format="json")
        alice.post(URL, {**body, "name": "plain", "env_class": "dev"}, format="json")
    alice.post(
        URL, {**body, "name": "spotty", "env_class": "dev", "spot_node_pool": True}, format="json"
    )
    # A quarantine owner, which no happy path sets.
    Environment.objects.filter(name="plain").update(
        quarantine_owner=get_user_model().objects.get(username="carol")
    )
    return list(Environment.objects.order_by("id"))


def test_plain_payload_equals_the_detail_serializer_for_every_state(environments):
    statuses = set()
    for env in environments:
        plain = _json(out.environment_payload(env, detail=True))
        assert plain == _json(out.EnvironmentDetailOutput(env).data), env.name
        assert set(plain) == set(out.EnvironmentDetailOutput().fields)
        statuses.add(plain["status"])
    staged = _json(out.environment_payload(environments[0], detail=True))
    # The case that fills every list: an approval, policy decisions, steps and manifests.
    assert staged["approvals"] and staged["policy_decisions"] and staged["steps"]
    assert staged["manifests"] and staged["ready_at"].endswith("Z")
    assert {"READY", "DENIED"} <= statuses


def test_plain_payload_equals_the_list_serializer(environments):
    for env in environments:
        assert _json(out.environment_payload(env)) == _json(out.EnvironmentOutput(env).data)


def test_api_answers_carry_the_serializers_shape(api_client_for, environments):
    alice = api_client_for("engineer", sub="alice", team="payments")
    page = alice.get(URL).json()["results"]
    assert page and all(set(row) == set(out.EnvironmentOutput().fields) for row in page)
    one = alice.get(f"{URL}{environments[0].public_id}/").json()
    assert one == _json(out.EnvironmentDetailOutput(environments[0]).data)
