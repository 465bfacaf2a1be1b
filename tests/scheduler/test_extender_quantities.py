"""Hostile quantities and node objects in ExtenderArgs: a 400 with the reason (or a node failed as
malformed), never a Decimal overflow, a 500 or a logged traceback; in both nodeCacheCapable modes."""

from __future__ import annotations

import json
import logging
from decimal import Decimal

import pytest
from django.test import Client

from scheduler.extender.protocol import ProtocolError, parse_quantity
from tests.scheduler.conftest import node_object, pod

pytestmark = pytest.mark.django_db

HOSTILE = [
    ("1e1000000", "exceeds Kubernetes' maximum"),
    ("9" * 5000, "exceeds Kubernetes' maximum"),
    ("1e99Ei", "exceeds Kubernetes' maximum"),
    ("9223372036854775808", "exceeds Kubernetes' maximum"),
    ("1e" + "9" * 5000, "is not a number"),
    ("-1", "is negative"),
    ("-250m", "is negative"),
    ("NaN", "is not a Kubernetes quantity"),
    ("Infinity", "is not a Kubernetes quantity"),
    ("²", "is not a Kubernetes quantity"),
    ("1.2.3", "is not a number"),
    ("1e3\n5", "is not a Kubernetes quantity"),
]
HOSTILE_IDS = [
    "exponent-1e1000000",
    "5000-digits",
    "exponent-and-suffix",
    "just-over-int64",
    "5000-digit-exponent",
    "negative",
    "negative-milli",
    "nan",
    "infinity",
    "unicode-digit",
    "two-points",
    "inner-newline",
]


def post(path: str, body: dict) -> object:
    """POST a JSON body to the extender through Django, as kube-scheduler would."""
    return Client().post(path, data=json.dumps(body), content_type="application/json")


def pods_with(quantity: str) -> dict[str, dict]:
    """One pod per place a quantity is read: container request, limit, init container, overhead."""
    init = [{"name": "init", "resources": {"requests": {"cpu": quantity}}}]
    limits = {"name": "c", "resources": {"limits": {"memory": quantity}}}
    return {
        "request": pod("standard", cpu=quantity),
        "limit": pod("standard", containers=[limits]),
        "init": pod("standard", initContainers=init),
        "overhead": pod("standard", overhead={"cpu": "10m", "memory": quantity}),
        "gpu": pod(
            "standard", containers=[{"resources": {"requests": {"nvidia.com/gpu": quantity}}}]
        ),
    }


@pytest.mark.parametrize(("quantity", "reason"), HOSTILE, ids=HOSTILE_IDS)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_hostile_pod_quantities_get_a_400_with_the_reason_and_no_traceback(
    inventory, caplog, verb, quantity, reason
):
    caplog.set_level(logging.WARNING)
    for where, hostile in pods_with(quantity).items():
        for names_or_nodes in (
            {"NodeNames": ["node-od", "node-spot"]},
            {"Nodes": {"items": [node_object("node-od", "on-demand")]}},
        ):
            response = post(f"/scheduler/{verb}", {"Pod": hostile, **names_or_nodes})
            assert response.status_code == 400, (where, response.content[:200])
            data = response.json()
            message = data["Error"] if verb == "filter" else data["message"]
            assert reason in message, (where, message)
            assert data["code"] == "malformed"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize(("quantity", "reason"), HOSTILE, ids=HOSTILE_IDS)
def test_a_node_with_a_hostile_allocatable_is_failed_as_malformed(
    inventory, caplog, quantity, reason
):
    caplog.set_level(logging.WARNING)
    hostile = node_object("node-od", "on-demand", cpu=quantity)
    gpu = node_object("node-mystery", None)
    gpu["status"]["allocatable"]["nvidia.com/gpu"] = quantity
    fine = node_object("node-spot", "spot")
    body = {"Pod": pod("batch"), "Nodes": {"items": [hostile, gpu, fine]}}
    response = post("/scheduler/filter", body)
    assert response.status_code == 200
    result = response.json()
    assert result["FailedNodes"] == {
        "node-od": "node object is malformed",
        "node-mystery": "node object is malformed",
    }
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["node-spot"]
    ranked = post("/scheduler/prioritize", body)
    assert ranked.status_code == 200
    scores = {e["Host"]: e["Score"] for e in ranked.json()}
    assert scores["node-od"] == scores["node-mystery"] == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # Kubernetes' own bounds: 2^63-1 base units is the largest; below 1n rounds up to 1n.
        ("9223372036854775807", Decimal(2**63 - 1)),
        ("7Ei", Decimal(7 * 2**60)),
        ("1e-1000000", Decimal("1e-9")),
        ("0.0000000001", Decimal("1e-9")),
        ("0e-999999999", Decimal(0)),
        ("-0", Decimal(0)),
        ("+1.5k", Decimal(1500)),
        ("250m", Decimal("0.25")),
        (1e-300, Decimal("1e-9")),
        (3, Decimal(3)),
    ],
    ids=[
        "int64-max",
        "7Ei",
        "tiny-exponent",
        "below-1n",
        "zero-tiny-exponent",
        "minus-zero",
        "signed-plus",
        "milli",
        "tiny-float",
        "integer",
    ],
)
def test_quantities_at_kubernetes_bounds_are_read_as_kubernetes_holds_them(value, expected):
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    "value",
    [1e308, float("inf"), float("nan"), -1, 2**64],
    ids=["huge", "inf", "nan", "neg", "2^64"],
)
def test_json_numbers_outside_the_bounds_are_refused(value):
    with pytest.raises(ProtocolError):
        parse_quantity(value)


@pytest.mark.parametrize(
    "items",
    [[{"metadata": [1]}], [{"metadata": "node-od"}], [{"metadata": {"name": "node-od"}}, 7]],
    ids=["metadata-list", "metadata-string", "item-number"],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_a_node_list_item_without_an_object_metadata_is_a_400(inventory, caplog, verb, items):
    caplog.set_level(logging.WARNING)
    response = post(f"/scheduler/{verb}", {"Pod": pod("batch"), "Nodes": {"items": items}})
    assert response.status_code == 400
    data = response.json()
    message = data["Error"] if verb == "filter" else data["message"]
    assert "every node in Nodes.items needs metadata.name" in message
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize(
    "node",
    [
        {"metadata": {"name": "node-od", "labels": ["spot"]}},
        {"metadata": {"name": "node-od"}, "status": [1]},
        {"metadata": {"name": "node-od"}, "status": "Ready"},
    ],
    ids=["labels-list", "status-list", "status-string"],
)
def test_a_node_whose_labels_or_status_is_not_an_object_is_failed_as_malformed(
    inventory, caplog, node
):
    caplog.set_level(logging.WARNING)
    body = {"Pod": pod("batch"), "Nodes": {"items": [node, node_object("node-spot", "spot")]}}
    response = post("/scheduler/filter", body)
    assert response.status_code == 200
    assert response.json()["FailedNodes"] == {"node-od": "node object is malformed"}
    assert post("/scheduler/prioritize", body).status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
