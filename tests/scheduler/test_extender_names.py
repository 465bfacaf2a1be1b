"""Names looked up from the bytes of a JSON array (`lookup.positions` in a `NameTable`) equal a dict
lookup of the decoded names, and a body decoded in two parts gives the same resolved args as decoding
it whole."""

from __future__ import annotations

import json
from itertools import repeat

import numpy as np
import orjson
import pytest

from bench.management.commands.scheduler_bench import names_per_call
from bench.scheduler import extender as bench
from scheduler.extender.encoding import names_are_plain
from scheduler.extender.lookup import positions
from scheduler.extender.names import NameTable
from scheduler.extender.protocol import ProtocolError, parse_args
from scheduler.extender.snapshot import NodeSnapshot
from scheduler.kubedefault import num_feasible_nodes_to_find
from tests.scheduler.conftest import pod


def by_dict(table_names: list[str], candidates: list[str]) -> np.ndarray:
    """The reference: each candidate's position in table_names, -1 when absent."""
    index = {name: i for i, name in enumerate(table_names)}
    return np.fromiter(
        map(index.get, candidates, repeat(-1)), dtype=np.int64, count=len(candidates)
    )


@pytest.mark.parametrize(
    "table_names, candidates",
    [
        (["a", "b", "c"], ["c", "a", "b"]),
        (["a", "b"], ["a", "ghost", "b", "a"]),  # unknown and repeated names
        (["node-1", "node-10"], ["node-10", "node-1", "node-100"]),  # prefixes are not equal
        (["x" * 40, "x" * 41], ["x" * 41, "x" * 40, "x" * 42]),  # past the table's longest name
        (["knoten-ä", "노드", "ノード-1"], ["노드", "ノード-1", "knoten-a", "knoten-ä"]),
        (["", "a"], ["", "a", " "]),  # the empty name is a name
        (["a", 'quo"te', "b"], ["b", "a"]),  # a name that needs escaping is left out of the table
        ([], ["a", "b"]),  # an empty inventory knows nothing
        (["a"], []),
    ],
    ids=[
        "permuted",
        "unknown-and-repeated",
        "prefixes",
        "longer-than-any",
        "non-ascii",
        "empty-name",
        "escaped-in-table",
        "empty-table",
        "empty-list",
    ],
)
def test_table_lookup_equals_the_dict(table_names, candidates):
    got = positions(NameTable(table_names), orjson.dumps(candidates))
    assert got is not None
    assert got.tolist() == by_dict(table_names, candidates).tolist()


def test_table_lookup_reads_any_json_whitespace_between_names():
    names = [f"n{i}" for i in range(50)]
    spaced = json.dumps(names[::-1], indent=2).encode()  # newlines and spaces, as a client may send
    assert positions(NameTable(names), spaced).tolist() == list(range(49, -1, -1))


def test_an_array_with_an_escape_is_not_looked_up_as_bytes():
    # '"a\\u0062"' decodes to "ab": its bytes are not the name, so the caller decodes it.
    assert positions(NameTable(["ab"]), b'["a\\u0062"]') is None


@pytest.mark.parametrize(
    "array",
    [
        b'["a",]',
        b'["a" "b"]',
        b"[",
        b'["a"',
        b'["a"]x',
        b'{"a": "b"}',
        b'["a\x01"]',
        b'[,"a"]',
        b'["a",,"b"]',
        b"",
        b"[1]",
        b'["a", null]',
        b"[] ]",
    ],
    ids=[
        "trailing-comma",
        "no-comma",
        "unclosed",
        "unterminated-string",
        "after-the-array",
        "an-object",
        "control-character",
        "leading-comma",
        "double-comma",
        "empty",
        "a-number",
        "null",
        "two-closings",
    ],
)
def test_bytes_that_are_not_an_array_of_plain_strings_are_not_looked_up(array):
    # The caller then decodes them with orjson, which refuses them or reads what they mean.
    assert positions(NameTable(["a", "b"]), array) is None


def test_an_empty_array_with_whitespace_finds_nothing():
    assert positions(NameTable(["a"]), b" [ \n] ").tolist() == []


def test_a_crowded_table_probes_past_other_names_and_stays_exact():
    rng = np.random.default_rng(5)
    names = [f"ip-10-{i // 250}-{i % 250}-{rng.integers(1000)}.ec2.internal" for i in range(6000)]
    names = list(dict.fromkeys(names))
    table = NameTable(names)
    assert table.probes > 1  # some names sit past their home slot
    candidates = [names[i] for i in rng.permutation(len(names))] + ["ip-10-0-0-1.ec2.internal"]
    got = positions(table, orjson.dumps(candidates))
    assert got.tolist() == by_dict(names, candidates).tolist()


def long_body(names: list[str]) -> bytes:
    return orjson.dumps({"Pod": pod("batch"), "Nodes": None, "NodeNames": names})


def test_a_long_list_split_from_its_body_resolves_like_a_dict_lookup():
    snapshot = bench.synthetic_snapshot(2048)
    rng = np.random.default_rng(9)
    names = [snapshot.names[i] for i in rng.permutation(len(snapshot.names))] + ["ghost"]
    args = parse_args(long_body(names), snapshot)
    assert args.names == names
    assert args.resolution.idx.tolist() == by_dict(snapshot.names, names).tolist()
    assert args.resolution.usable.tolist() == [True] * (len(names) - 1) + [False]
    rows = snapshot.matrix[args.resolution.idx[:-1]]
    assert np.array_equal(args.resolution.rows[:-1], rows, equal_nan=True)  # unpriced: NaN
    assert args.resolution.plain == names_are_plain(names)
    # The same list resolved from decoded names alone (no bytes) is the same resolution.
    fresh = NodeSnapshot(snapshot.names, snapshot.matrix)
    reference = fresh.resolve(names)
    assert reference.idx.tolist() == args.resolution.idx.tolist()
    assert np.array_equal(reference.rows, args.resolution.rows, equal_nan=True)


def test_a_list_of_known_names_is_taken_from_the_inventory_without_decoding_and_equals_it():
    snapshot = bench.synthetic_snapshot(2048)
    rng = np.random.default_rng(4)
    names = [snapshot.names[i] for i in rng.permutation(len(snapshot.names))[:1500]]
    body = long_body(names)
    args = parse_args(body, snapshot)
    assert args.names == orjson.loads(body)["NodeNames"] == names
    assert args.resolution.idx.tolist() == by_dict(snapshot.names, names).tolist()
    assert args.resolution.all_known and args.resolution.plain
    # Whitespace between the names (as a client other than Go may send) reads the same.
    spaced = json.dumps({"Pod": pod("batch"), "Nodes": None, "NodeNames": names}, indent=1)
    assert parse_args(spaced.encode(), NodeSnapshot(snapshot.names, snapshot.matrix)).names == names


def test_a_known_name_written_with_an_escape_resolves_like_the_plain_name():
    snapshot = bench.synthetic_snapshot(64)
    names = snapshot.names[:40]
    body = long_body(names).replace(b'"node-00003"', b'"node-0000\\u0033"')
    args = parse_args(body, snapshot)
    assert args.names == names
    assert args.resolution.idx.tolist() == list(range(40))


def test_a_node_names_array_that_is_not_the_top_level_value_is_decoded_whole():
    snapshot = bench.synthetic_snapshot(1024)
    nested = {"items": [{"metadata": {"name": "node-00001"}}], "NodeNames": snapshot.names}
    body = orjson.dumps({"Pod": pod("batch"), "Nodes": nested})
    args = parse_args(body, snapshot)
    assert not args.cache_mode and args.names == ["node-00001"]


@pytest.mark.parametrize(
    "body, reason",
    [
        (b'{"Pod": {}, "NodeNames": ["a", 1]}', "NodeNames must be a list of strings"),
        (b'{"Pod": {}, "NodeNames": ["a", ]}', "body is not JSON"),
        (b'{"Pod": [], "NodeNames": ["a"]}', "Pod is missing or not an object"),
        (b'{"Pod": {}, "NodeNames": ["node-00001", "\xff"]}', "body is not JSON"),
    ],
    ids=["not-a-string", "trailing-comma", "bad-pod", "not-utf-8-beside-a-known-name"],
)
def test_a_split_body_that_is_wrong_is_refused_with_the_whole_decode_reason(body, reason):
    with pytest.raises(ProtocolError, match=reason):
        parse_args(body, bench.synthetic_snapshot(10))


def test_bench_list_sizes_follow_kube_scheduler_adaptive_sampling():
    # 12,477 nodes: 50 - 12477 // 125 = -49, so the 5% floor: 12477 * 5 // 100 = 623.
    assert names_per_call("adaptive", 12477) == num_feasible_nodes_to_find(12477) == 623
    assert names_per_call("all", 12477) == 12477
    assert names_per_call("900", 300) == 300
    snapshot = bench.synthetic_snapshot(400)
    pairs = bench.node_list_bodies(snapshot, lists=6, size=100, varied=True)
    lists = [orjson.loads(f)["NodeNames"] for f, _ in pairs]
    assert all(len(names) == 100 for names in lists) and len(set(map(tuple, lists))) == 6
    floor = bench.parse_floor(pairs, 12)
    assert set(floor) == {"orjson", "json"}
    assert 0 < floor["orjson"]["p50_ms"] <= floor["orjson"]["p99_ms"]
