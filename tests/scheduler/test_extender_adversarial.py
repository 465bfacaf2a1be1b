"""Hostile NodeNames bodies through the extender's fast parse path: every one is answered (200 with the
reference answer, or a 4xx with the reason), never an exception; names never decoded equal decoding."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.scheduler import extender as bench
from scheduler.extender.handler import extender_call
from scheduler.extender.protocol import parse_args
from scheduler.extender.snapshot import NodeSnapshot
from scheduler.extender.verbs import filter_result, prioritize_result
from scheduler.scoring import Weights
from tests.scheduler.conftest import pod

UNKNOWN = "node is not in kiln's inventory"


def inventory() -> NodeSnapshot:
    """300 synthetic nodes, half spot, priced (a fresh snapshot: no cache shared between tests)."""
    base = bench.synthetic_snapshot(300)
    return NodeSnapshot(base.names, base.matrix, max_price=0.5)


def body_with(names_json: bytes, workload_class: str | None = "standard") -> bytes:
    """An ExtenderArgs body ending in the given NodeNames bytes, as kube-scheduler orders it."""
    return (
        b'{"Pod":'
        + orjson.dumps(pod(workload_class))
        + b',"Nodes":null,"NodeNames":'
        + names_json
        + b"}"
    )


def answer(verb: str, body: bytes, snapshot: NodeSnapshot) -> tuple[int, object]:
    """The extender's (status, decoded JSON) for one call against `snapshot`."""
    status, payload = extender_call(verb, body, None, lambda: snapshot)
    return status, orjson.loads(payload)


def reference(verb: str, body: bytes, snapshot: NodeSnapshot) -> object:
    """The numpy reference's answer for a body decoded whole, against a fresh copy of the inventory."""
    fresh = NodeSnapshot(snapshot.names, snapshot.matrix, max_price=snapshot.max_price)
    args = parse_args(body)
    if verb == "filter":
        return filter_result(args, fresh)
    return prioritize_result(args, fresh, Weights())


@pytest.mark.parametrize(
    ("names_json", "reason"),
    [
        (b'["node-00001", "node-00002"', "body is not JSON"),  # unterminated array
        (b'["node-00001",]', "body is not JSON"),  # trailing comma
        (b'["node-00001" "node-00002"]', "body is not JSON"),  # missing comma
        (b'["node-00001", 7]', "NodeNames must be a list of strings"),
        (b"[null]", "NodeNames must be a list of strings"),
        (b'[["node-00001"]]', "NodeNames must be a list of strings"),
        (b'[{"name": "node-00001"}]', "NodeNames must be a list of strings"),
        (b'"node-00001"', "NodeNames must be a list of strings"),
        (b'["node-\xff"]', "body is not JSON"),  # not UTF-8: never a name
        (b'["node-\x01"]', "body is not JSON"),  # a raw control character in a string
        (b'["node-00001\\u00"]', "body is not JSON"),  # a broken escape
    ],
    ids=[
        "unterminated",
        "trailing-comma",
        "missing-comma",
        "number",
        "null",
        "nested-list",
        "object",
        "string-not-list",
        "bad-utf8",
        "control-char",
        "broken-escape",
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_a_malformed_node_names_array_is_a_400_with_the_reason(verb, names_json, reason):
    status, data = answer(verb, body_with(names_json), inventory())
    assert status == 400
    assert data["code"] == "malformed"
    assert reason in (data["Error"] if verb == "filter" else data["message"])


@pytest.mark.parametrize(
    "names",
    [
        ["node-00001", "node-00001", "node-00002"],  # a name twice
        ["node-00001", "ghost", "node-00002", "ghost"],  # unknown names, one twice
        [f"ghost-{i}" for i in range(500)],  # nothing known
        ["node-0000", "node-000011", "node-00001 ", " node-00001"],  # near misses of known names
        ["node-\u00e9", "node-\u0000", 'node-"q"', "node-00003"],  # escapes beside a known name
        [],
    ],
    ids=["duplicate", "unknown", "all-unknown", "near-misses", "escapes", "empty"],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("compact", [True, False], ids=["go-compact", "spaced"])
def test_odd_but_valid_lists_get_the_reference_answer(verb, names, compact):
    snapshot = inventory()
    names_json = orjson.dumps(names) if compact else json.dumps(names).encode()
    body = body_with(names_json, "latency-sensitive")
    for _ in range(3):  # seen once, then from the cache, then from remembered bytes
        status, data = answer(verb, body, snapshot)
        assert status == 200
        assert data == reference(verb, body, snapshot)
    if verb == "filter" and "ghost" in names:
        assert data["FailedNodes"]["ghost"] == UNKNOWN


def test_a_list_far_longer_than_the_inventory_is_answered():
    snapshot = inventory()
    names = [snapshot.names[i % 300] for i in range(60_000)] + ["ghost"]
    body = body_with(orjson.dumps(names))
    status, data = answer("filter", body, snapshot)
    assert status == 200 and data == reference("filter", body, snapshot)
    status, ranked = answer("prioritize", body, snapshot)
    assert status == 200 and len(ranked) == len(names)


def test_a_body_over_the_limit_is_a_413(settings):
    settings.KILN_SCHEDULER_MAX_BODY_BYTES = 10_000
    body = body_with(orjson.dumps([f"node-{i % 300:05d}" for i in range(2_000)]))
    status, data = answer("filter", body, inventory())
    assert status == 413 and data["code"] == "too_large"


def test_names_never_decoded_are_read_from_the_inventory_alike():
    snapshot = inventory()
    names = snapshot.names[::-2]
    args = parse_args(body_with(orjson.dumps(names)), snapshot)
    assert args.decoded is None  # every name was found from the bytes: no list was built
    assert args.count == len(names)
    assert args.names == names == parse_args(body_with(orjson.dumps(names))).names


VALID = body_with(orjson.dumps(["node-00001", "node-00002", "ghost", "node-00003"]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.integers(min_value=len(VALID) - 60, max_value=len(VALID) - 1),
    byte=st.integers(min_value=0, max_value=255),
    mode=st.sampled_from(["replace", "insert", "delete"]),
    verb=st.sampled_from(["filter", "prioritize"]),
)
def test_property_a_mangled_node_names_array_is_answered_like_the_whole_decode(
    cut, byte, mode, verb
):
    # One byte changed, added or dropped in the NodeNames array: the answer is the reference's
    # for the body decoded whole when that decodes to valid ExtenderArgs, else a 400.
    if mode == "replace":
        body = VALID[:cut] + bytes([byte]) + VALID[cut + 1 :]
    elif mode == "insert":
        body = VALID[:cut] + bytes([byte]) + VALID[cut:]
    else:
        body = VALID[:cut] + VALID[cut + 1 :]
    snapshot = inventory()
    status, data = answer(verb, body, snapshot)
    try:
        expected = reference(verb, body, snapshot)
    except ValueError:  # ProtocolError: the whole decode refuses it too
        assert status == 400 and data["code"] == "malformed"
        return
    assert status == 200 and data == expected
