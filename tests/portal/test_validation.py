"""The request's field rules, before any policy: clear words naming the limits that apply."""

from __future__ import annotations

from portal.validation import field_errors

WELL_FORMED = {
    "name": "web", "team": "payments", "env_class": "dev", "workload_class": "standard",
    "ttl_hours": 24, "cpu": 4, "memory_gib": 16, "gpu": 0,
}  # fmt: skip


def test_a_well_formed_request_has_no_field_errors():
    assert field_errors(WELL_FORMED) == {}


def test_too_many_gpus_names_the_platforms_limit_and_the_classs():
    errors = field_errors({**WELL_FORMED, "gpu": 50})
    assert errors == {
        "gpu": ["Must be a whole number from 0 to 16; a dev environment may have at most 2."]
    }
    assert field_errors({**WELL_FORMED, "cpu": 0})["cpu"] == [
        "Must be a whole number from 1 to 256."
    ]


def test_an_unknown_class_names_only_the_platforms_gpu_limit():
    errors = field_errors({**WELL_FORMED, "env_class": "huge", "gpu": -1})
    assert errors["gpu"] == ["Must be a whole number from 0 to 16."]
    assert errors["env_class"] == ["Choose one of ephemeral, dev, staging, prod."]
