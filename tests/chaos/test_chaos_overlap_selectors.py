"""Label selector intersection (canary/chaos/overlap.py): worked cases, and a property test
against brute force over every pod a small label universe can hold."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canary.chaos.overlap import (
    Target,
    conflicting_key,
    matches,
    overlap_reason,
    selectors_intersect,
    windows_overlap,
)

KEYS = ("app", "tier", "zone")
VALUES = ("a", "b", "c")
FRESH = "z"  # a value no generated selector names: stands for all such values


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # Same key, same value: a pod app=web is both targets.
        ({"app": "web"}, {"app": "web"}, True),
        # Same key, different values: no pod carries two values of one key.
        ({"app": "web"}, {"app": "api"}, False),
        # Different keys never conflict: a pod app=web,tier=front matches both.
        ({"app": "web"}, {"tier": "front"}, True),
        # One key agrees, another disagrees: disjoint.
        ({"app": "web", "tier": "front"}, {"app": "web", "tier": "back"}, False),
        # In with a common value.
        (
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]},
            {"app": "api"},
            True,
        ),
        # NotIn takes out the only allowed value.
        (
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]},
            {"app": "web"},
            False,
        ),
        # NotIn alone never separates: a pod with another value (or none) matches both.
        (
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]},
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["api"]}]},
            True,
        ),
        # DoesNotExist against a required value.
        (
            {"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]},
            {"canary": "true"},
            False,
        ),
        # Exists against DoesNotExist.
        (
            {"matchExpressions": [{"key": "canary", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]},
            False,
        ),
    ],
    ids=[
        "same-value",
        "different-values",
        "different-keys",
        "one-key-disagrees",
        "in-shares-a-value",
        "notin-removes-the-value",
        "two-notins",
        "absent-vs-value",
        "exists-vs-absent",
    ],
)
def test_worked_cases(a, b, expected):
    assert selectors_intersect(a, b) is expected
    assert selectors_intersect(b, a) is expected


def test_the_conflicting_key_is_named():
    assert (
        conflicting_key({"app": "web", "tier": "front"}, {"app": "web", "tier": "back"}) == "tier"
    )


def _requirement():
    key = st.sampled_from(KEYS)
    values = st.lists(st.sampled_from(VALUES), min_size=1, max_size=3, unique=True)
    return st.one_of(
        st.builds(lambda k, v: {"key": k, "operator": "In", "values": v}, key, values),
        st.builds(lambda k, v: {"key": k, "operator": "NotIn", "values": v}, key, values),
        st.builds(lambda k: {"key": k, "operator": "Exists"}, key),
        st.builds(lambda k: {"key": k, "operator": "DoesNotExist"}, key),
    )


SELECTORS = st.fixed_dictionaries(
    {
        "matchLabels": st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
        "matchExpressions": st.lists(_requirement(), max_size=4),
    }
)


def _every_pod():
    """Every label set over KEYS: each key absent, one of VALUES, or a value nobody names."""
    for choice in itertools.product((None, *VALUES, FRESH), repeat=len(KEYS)):
        yield {k: v for k, v in zip(KEYS, choice, strict=True) if v is not None}


@settings(max_examples=400, deadline=None)
@given(SELECTORS, SELECTORS)
def test_selectors_intersect_exactly_when_some_pod_matches_both(a, b):
    # Brute force: a value outside VALUES behaves like any other unnamed value, so the 5**3 pods
    # above cover every way a pod can stand towards these selectors.
    witness = any(matches(a, pod) and matches(b, pod) for pod in _every_pod())
    assert selectors_intersect(a, b) is witness
    assert selectors_intersect(b, a) is witness


@settings(max_examples=200, deadline=None)
@given(SELECTORS)
def test_a_selector_that_matches_some_pod_intersects_itself(a):
    assert selectors_intersect(a, a) is any(matches(a, pod) for pod in _every_pod())


T0 = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((T0, T0 + timedelta(minutes=10)), (T0 + timedelta(minutes=5), None), True),
        # Half-open: one ending as the other starts does not overlap.
        ((T0, T0 + timedelta(minutes=10)), (T0 + timedelta(minutes=10), None), False),
        ((T0 + timedelta(minutes=20), None), (T0, T0 + timedelta(minutes=10)), False),
    ],
    ids=["inside", "touching", "after"],
)
def test_time_windows(a, b, expected):
    assert windows_overlap(a, b) is expected


def test_overlap_reason_names_the_host_or_the_pods():
    end = T0 + timedelta(minutes=10)
    web = Target("shop", {"app": "web"}, "web.shop.svc.cluster.local", T0, end)
    same_host = Target("shop", {"app": "other"}, "web.shop.svc.cluster.local", T0, end)
    pods = Target("shop", {"app": "web", "tier": "front"}, "", T0, end)
    elsewhere = Target("lab", {"app": "web"}, "", T0, end)
    assert overlap_reason(web, same_host) == "both fault the service web.shop.svc.cluster.local"
    assert overlap_reason(web, pods) == "their selectors can match the same pods in namespace shop"
    assert overlap_reason(web, elsewhere) is None
