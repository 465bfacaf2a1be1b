"""Kubernetes label syntax: the keys and values a selector may hold, against cases from the
API server's rules and generated ones."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln.cluster.labels import key_problem, selector_problem, value_problem

# The API server's own expressions (k8s.io/apimachinery validation: qualified name, label value).
QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize(
    "key", ["app", "app.kubernetes.io/name", "kiln.dev/team", "a", "A_b.c-9", "x" * 63]
)
def test_keys_the_cluster_takes(key):
    assert key_problem(key) is None


@pytest.mark.parametrize(
    "key", ["", "-app", "app-", "a b", "x" * 64, "/app", "Bad_Prefix/app", "kiln.dev/", "a/b/c"]
)
def test_keys_the_cluster_refuses(key):
    assert key_problem(key)


@pytest.mark.parametrize("value", ["", "=web", "web;;", "a b", "-web", "x" * 64, "ü"])
def test_values_the_cluster_refuses(value):
    assert value_problem("app", value)


def test_a_selector_needs_at_least_one_valid_pair():
    assert selector_problem({"app": "web", "tier": "front"}) is None
    assert selector_problem({}) and selector_problem(None) and selector_problem(["app"])
    assert "app" in selector_problem({"app": "=web"})


def _api_server_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and bool(QUALIFIED.fullmatch(name))


@given(st.text(alphabet="aZ09-_./ü ", max_size=70))
def test_a_key_is_refused_exactly_when_the_api_server_would(key):
    assert (key_problem(key) is None) == _api_server_key(key)


@given(st.text(alphabet="aZ09-_. =;", max_size=70))
def test_a_value_is_refused_exactly_when_the_api_server_would(value):
    accepted = 0 < len(value) <= 63 and bool(QUALIFIED.fullmatch(value))
    assert (value_problem("app", value) is None) == accepted
