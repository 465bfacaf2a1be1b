"""One wording per rule: the request form names a refused field in the API's own words (the
form's bounds are the shared rules of portal.validation, not Django's generic messages)."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse

from kiln.identity.models import Membership, Team
from portal.conf import MAX_CPU, MAX_GPU, MAX_GPU_PER_CLASS, MAX_MEMORY_GIB, MAX_TTL_HOURS
from portal.forms import EnvironmentRequestForm
from tests.portal.test_pages import FORM, login

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("cpu", MAX_CPU + 1, f"Must be a whole number from 1 to {MAX_CPU}."),
        ("cpu", 0, f"Must be a whole number from 1 to {MAX_CPU}."),
        ("memory_gib", MAX_MEMORY_GIB + 1, f"Must be a whole number from 1 to {MAX_MEMORY_GIB}."),
        ("gpu", MAX_GPU + 1, f"Must be a whole number from 0 to {MAX_GPU}; a dev environment "
         f"may have at most {MAX_GPU_PER_CLASS['dev']}."),
        ("ttl_hours", 0, "TTL must be a whole number of hours, at least 1."),
        ("ttl_hours", MAX_TTL_HOURS["dev"] + 1,
         f"TTL {MAX_TTL_HOURS['dev'] + 1}h exceeds the dev limit of {MAX_TTL_HOURS['dev']}h."),
        ("name", "Not_A_Label",
         "Use a DNS-1123 label: lower-case letters, digits and '-', at most 40 characters."),
    ],
    ids=["cpu-high", "cpu-zero", "memory-high", "gpu-high", "ttl-zero", "ttl-over-class", "name"],
)  # fmt: skip
def test_the_form_and_the_api_refuse_a_field_in_the_same_words(api, field, value, words):
    body = {"team": "payments", "name": "web", "env_class": "dev", "ttl_hours": 8,
            "workload_class": "standard", "cpu": 2, "memory_gib": 4, "gpu": 0, field: value}  # fmt: skip
    answer = api("engineer", sub="alice", team="payments").post(
        "/api/v1/environments/", body, format="json"
    )
    assert answer.status_code == 400
    assert answer.json()["extra"]["fields"][field] == [words]
    form = EnvironmentRequestForm(
        {**FORM, "env_class": "dev", field: str(value)}, teams=["payments"]
    )
    assert not form.is_valid()
    assert form.errors[field] == [words]


def test_the_page_shows_the_apis_words_beside_the_field(api):
    alice = login("alice", "engineer", Team.objects.get(slug="payments"))
    assert Membership.objects.filter(user__username="alice").exists()
    page = alice.post(reverse("portal:environment-request"), {**FORM, "cpu": str(MAX_CPU + 1)})
    assert page.status_code == 200
    assert f"Must be a whole number from 1 to {MAX_CPU}." in html.unescape(page.content.decode())
    assert "Ensure this value" not in page.content.decode()
