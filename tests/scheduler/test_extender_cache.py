"""The extender's per-snapshot caches: resolved candidate lists, remembered NodeNames bytes, and
the encodings built on them decode to exactly what the reference functions return."""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.scheduler import extender as bench
from scheduler import scoring, scoring_kernel, selectors
from scheduler.extender.encoding import KEY, encode_map
from scheduler.extender.protocol import ProtocolError, parse_args, parse_quantity
from scheduler.extender.snapshot import RESOLUTION_CACHE_SIZE, NodeSnapshot
from scheduler.extender.verbs import (
    filter_body,
    filter_result,
    prioritize_body,
    prioritize_result,
    reason_codes,
)
from scheduler.models import CapacityType, Node
from scheduler.scoring import BATCH, LATENCY_SENSITIVE, STANDARD, NodeArrays, PodRequest, Weights
from tests.scheduler.conftest import pod
from tests.scheduler.test_scoring import cluster_from, row_strategy

UNKNOWN = "node is not in kiln's inventory"
SPOT_REASON = "node is spot capacity and the pod is latency-sensitive"


def body_of(names: list[str], workload_class: str | None, *, compact: bool, **pod_extra) -> bytes:
    """ExtenderArgs bytes, compact as Go writes them or with json.dumps' spaces."""
    data = {"Pod": pod(workload_class, **pod_extra), "Nodes": None, "NodeNames": names}
    return orjson.dumps(data) if compact else json.dumps(data).encode()


def small_snapshot() -> NodeSnapshot:
    snapshot = bench.synthetic_snapshot(300)
    return NodeSnapshot(snapshot.names, snapshot.matrix, max_price=0.5)


def test_an_equal_candidate_list_reuses_its_resolution():
    snapshot = small_snapshot()
    first = snapshot.resolve(list(snapshot.names))
    again = snapshot.resolve([str(n) for n in snapshot.names])  # equal list, new objects
    assert again is first
    other = snapshot.resolve(snapshot.names[:-1])
    assert other is not first
    assert other.idx.tolist() == list(range(299))
    # Same length, another order: a different resolution, never a guess from the length.
    rotated = snapshot.resolve([*snapshot.names[1:], snapshot.names[0]])
    assert rotated is not first
    assert rotated.idx.tolist() == [*range(1, 300), 0]
    assert snapshot.resolve(list(snapshot.names)) is first


def test_resolutions_are_bounded_and_read_only():
    snapshot = small_snapshot()
    lists = [snapshot.names[i:] for i in range(RESOLUTION_CACHE_SIZE + 3)]
    resolutions = [snapshot.resolve(names) for names in lists]
    assert len(snapshot._resolutions) == RESOLUTION_CACHE_SIZE
    assert snapshot.resolve(lists[0]) is not resolutions[0]  # evicted, resolved anew
    with pytest.raises(ValueError):
        resolutions[-1].rows[0, 0] = 1.0


def test_a_cached_resolution_still_reports_unknown_names():
    snapshot = small_snapshot()
    names = ["node-00001", "ghost-1", "node-00002", "ghost-2"]
    body = body_of(names, "batch", compact=True)
    for _ in range(3):  # the first call fills the caches, the others use them
        result = orjson.loads(filter_body(parse_args(body, snapshot), snapshot)[0])
        assert result["FailedNodes"]["ghost-1"] == UNKNOWN
        assert result["FailedNodes"]["ghost-2"] == UNKNOWN
        assert not {"ghost-1", "ghost-2"} & set(result["NodeNames"])
        ranked = orjson.loads(prioritize_body(parse_args(body, snapshot), snapshot, Weights()))
        assert ranked[1] == {"Host": "ghost-1", "Score": 0}
        assert ranked[3] == {"Host": "ghost-2", "Score": 0}


@pytest.mark.parametrize("compact", [True, False], ids=["go-compact", "spaced"])
def test_remembered_names_bytes_give_the_same_args_as_decoding(compact):
    snapshot = small_snapshot()
    names = snapshot.names[::-1]
    first = parse_args(body_of(names, None, compact=compact), snapshot)
    assert first.resolution is not None and not first.resolution.raw  # seen once
    again = parse_args(body_of(names, "standard", compact=compact), snapshot)
    assert again.resolution is first.resolution and first.resolution.raw  # came back
    # Another pod with the same candidate bytes: the names are not decoded again.
    body = body_of(names, "batch", compact=compact, cpu="3")
    fast = parse_args(body, snapshot)
    plain = parse_args(body)
    assert fast.names is first.resolution.names
    assert fast.resolution is first.resolution
    assert (fast.pod, fast.cache_mode, fast.names) == (plain.pod, plain.cache_mode, plain.names)


def test_remembered_bytes_are_only_used_as_the_top_level_node_names():
    snapshot = small_snapshot()
    names = snapshot.names
    parse_args(body_of(names, None, compact=True), snapshot)
    raw = parse_args(body_of(names, None, compact=True), snapshot).resolution.raw
    assert raw
    pod_json = orjson.dumps(pod("batch"))
    # The same bytes under another key that ends in NodeNames: the real list is ["ghost"].
    tricky = b'{"Pod":' + pod_json + b',"NodeNames":["ghost"],"x\\"NodeNames":' + raw + b"}"
    args = parse_args(tricky, snapshot)
    assert args.names == ["ghost"]
    # Duplicate keys: the last one wins, as when decoding the whole body.
    twice = b'{"Pod":' + pod_json + b',"NodeNames":["ghost"],"NodeNames":' + raw + b"}"
    assert parse_args(twice, snapshot).names == names
    # Nodes given (nodeCacheCapable: false): the names are ignored either way.
    nodes = {"items": [{"metadata": {"name": "n1", "labels": {}}}]}
    with_nodes = b'{"Pod":' + pod_json + b',"Nodes":' + orjson.dumps(nodes)
    with_nodes += b',"NodeNames":' + raw + b"}"
    args = parse_args(with_nodes, snapshot)
    assert not args.cache_mode and args.names == ["n1"]
    # A body broken before the remembered bytes is still a protocol error.
    with pytest.raises(ProtocolError):
        parse_args(b'{"Pod":{"spec":[}, "NodeNames":' + raw + b"}", snapshot)


def test_a_new_snapshot_answers_from_its_own_nodes(inventory):
    """The caches live on the snapshot: an inventory change is a new snapshot, resolved anew."""
    names = ["node-od", "node-spot", "node-mystery"] * 100  # long enough to be remembered
    body = body_of(names, "latency-sensitive", compact=True)
    first = selectors.node_snapshot()
    result = orjson.loads(filter_body(parse_args(body, first), first)[0])
    assert result["FailedAndUnresolvableNodes"] == {"node-spot": SPOT_REASON}
    # Seen once, the candidate list is not remembered; what filter passed is expected, for
    # prioritize, under the bytes kube-scheduler writes for it.
    assert not first.remembered()
    passed = orjson.dumps(result["NodeNames"])
    assert first.recall(passed, 0, len(passed)).names == result["NodeNames"]
    parse_args(body, first)
    assert any(r.names == names for r in first.remembered())
    Node.objects.filter(name="node-spot").update(
        capacity_type=CapacityType.ON_DEMAND, labels={"karpenter.sh/capacity-type": "on-demand"}
    )
    selectors.snapshot_invalidate()
    second = selectors.node_snapshot()
    assert second is not first and not second.remembered()
    args = parse_args(body, second)
    assert args.resolution is not first.resolve(names)
    result = orjson.loads(filter_body(args, second)[0])
    assert result["FailedAndUnresolvableNodes"] == {}
    assert "node-spot" in result["NodeNames"]
    # Args resolved against the old snapshot are resolved again against the new one.
    stale = parse_args(body, first)
    result = orjson.loads(filter_body(stale, second)[0])
    assert result["FailedAndUnresolvableNodes"] == {}


def test_repeated_http_calls_follow_inventory_changes(inventory, client):
    names = ["node-od", "node-spot"] * 200
    body = body_of(names, None, compact=True)
    post = lambda: client.post("/scheduler/filter", data=body, content_type="application/json")  # noqa: E731
    assert post().json()["FailedAndUnresolvableNodes"] == {"node-spot": SPOT_REASON}
    assert post().json()["FailedAndUnresolvableNodes"] == {"node-spot": SPOT_REASON}
    Node.objects.filter(name="node-od").update(allocatable_cpu_millis=0)
    selectors.snapshot_invalidate()
    unresolvable = post().json()["FailedAndUnresolvableNodes"]
    assert unresolvable == {
        "node-spot": SPOT_REASON,
        "node-od": "node has no allocatable cpu or memory",
    }


# --- the fast encodings decode to the reference results ----------------------------------------

NAME_POOL = ["node-a", "node-b", 'we"ird', "back\\slash", "ünï", "tab\tname", "ghost", "node-c"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(row_strategy, min_size=1, max_size=12),
    st.lists(st.integers(0, 15), max_size=30),
    st.sampled_from([None, "latency-sensitive", "standard", "batch", "platinum"]),
    st.sampled_from(["0", "250m", "2", "64"]),
    st.booleans(),
    st.integers(1, 3),
)
def test_property_fast_filter_and_prioritize_equal_the_reference(
    rows, picks, workload_class, cpu, compact, repeats
):
    matrix = cluster_from(rows)
    names = [
        f"node-{i}" if i % 3 else NAME_POOL[i % len(NAME_POOL)] + str(i) for i in range(len(rows))
    ]
    snapshot = NodeSnapshot(names, matrix, max_price=3.0)
    candidates = [names[p] if p < len(names) else NAME_POOL[p % len(NAME_POOL)] for p in picks]
    body = body_of(candidates, workload_class, compact=compact, cpu=cpu, memory="1")
    reference_args = parse_args(body)
    expected_filter = filter_result(reference_args, snapshot)
    expected_ranked = prioritize_result(reference_args, snapshot, Weights())
    for _ in range(repeats):  # later rounds answer from the caches
        args = parse_args(body, snapshot)
        raw, unresolvable = filter_body(args, snapshot)
        assert orjson.loads(raw) == expected_filter
        assert unresolvable == len(expected_filter["FailedAndUnresolvableNodes"])
        assert orjson.loads(prioritize_body(args, snapshot, Weights())) == expected_ranked


def test_fast_filter_over_the_benchmark_inventory_equals_the_reference():
    snapshot = bench.synthetic_snapshot(2000)
    snapshot.matrix[::97, 0] = 0.0  # some zero-capacity nodes
    for workload_class in (None, "standard", "batch", "latency-sensitive"):
        body = bench.sample_body([*snapshot.names, "ghost"], workload_class)
        expected = filter_result(parse_args(body), snapshot)
        for _ in range(2):
            raw, count = filter_body(parse_args(body, snapshot), snapshot)
            assert orjson.loads(raw) == expected
            assert count == len(expected["FailedAndUnresolvableNodes"])
        assert np.any(expected["NodeNames"])


# --- the compiled filter and score equal the numpy reference -----------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.lists(row_strategy, min_size=1, max_size=40),
    st.builds(
        PodRequest,
        cpu=st.sampled_from([0.0, 0.1, 0.5, 2.0]),
        memory=st.sampled_from([0.0, 0.5, 4.0, 32.0]),
        gpu=st.sampled_from([0.0, 0.0, 1.0, 2.0]),
        workload_class=st.sampled_from([LATENCY_SENSITIVE, STANDARD, BATCH, "unknown"]),
    ),
    st.sampled_from([Weights(), Weights(1, 0, 0), Weights(0, 1, 0), Weights(0, 0, 1)]),
    st.lists(st.booleans(), min_size=40, max_size=40),
    st.booleans(),
)
def test_property_compiled_kernel_equals_the_numpy_reference(rows, pod, weights, usable, frozen):
    matrix = cluster_from(rows)
    if frozen:
        matrix.flags.writeable = False  # the cached resolutions' rows are read-only
    reference = scoring.filter_matrix(matrix, pod)
    assert scoring_kernel.filter_rows(matrix, pod).tolist() == reference.tolist()
    mask = np.array(usable[: len(rows)])
    compiled = scoring_kernel.filter_rows(matrix, pod, mask, scoring.REASON_ZERO_CAPACITY)
    masked = np.where(mask, reference, scoring.REASON_ZERO_CAPACITY).astype(np.int8)
    assert compiled.tolist() == masked.tolist()
    expected = scoring.score_nodes(NodeArrays.from_matrix(matrix), pod, weights, masked)
    assert scoring_kernel.score_rows(matrix, pod, weights, compiled).tolist() == expected.tolist()


def test_compiled_kernel_equals_the_reference_over_a_large_random_cluster():
    rng = np.random.default_rng(7)
    n = 5000
    matrix = np.zeros((n, 9))
    matrix[:, 0] = rng.choice([0.0, 2.0, 4.0, 16.0, 96.0], n)
    matrix[:, 1] = rng.choice([0.0, 8.0, 64.0, 384.0], n)
    matrix[:, 2] = rng.choice([0.0, 0.0, 1.0, 4.0, 8.0], n)
    matrix[:, 3] = matrix[:, 0] * rng.uniform(0, 1.1, n)
    matrix[:, 4] = matrix[:, 1] * rng.uniform(0, 1.1, n)
    matrix[:, 5] = np.floor(matrix[:, 2] * rng.uniform(0, 1, n))
    matrix[:, 6] = np.where(rng.random(n) < 0.05, np.nan, rng.uniform(0.01, 30, n))
    matrix[:, 7] = np.where(rng.random(n) < 0.1, np.nan, rng.choice([0.1, 0.5, 1.0], n))
    matrix[:, 8] = rng.random(n) < 0.5
    usable = rng.random(n) < 0.97
    for cpu, mem, gpu in [(0.0, 0.0, 0.0), (0.5, 2.0, 0.0), (4.0, 16.0, 1.0), (0.1, 0.5, 2.0)]:
        for workload_class in (LATENCY_SENSITIVE, STANDARD, BATCH):
            pod = PodRequest(cpu, mem, gpu, workload_class)
            nodes = NodeArrays.from_matrix(matrix)
            reference = scoring.filter_nodes(nodes, pod)
            reference = np.where(usable, reference, scoring.REASON_ZERO_CAPACITY).astype(np.int8)
            reasons = scoring_kernel.filter_rows(matrix, pod, usable, scoring.REASON_ZERO_CAPACITY)
            assert reasons.tolist() == reference.tolist()
            for weights in (Weights(), Weights(0, 1, 0), Weights(0.2, 0.7, 0.1)):
                expected = scoring.score_nodes(nodes, pod, weights, reference)
                got = scoring_kernel.score_rows(matrix, pod, weights, reasons)
                assert got.tolist() == expected.tolist()


@pytest.mark.parametrize(
    ("extra", "padded"),
    [("node-x", True), ("n" * 300, False)],
    ids=["even-names-space-padded", "one-long-name-nul-path"],
)
def test_fixed_width_encodings_decode_to_the_reference(extra, padded):
    base = bench.synthetic_snapshot(200)
    matrix = np.vstack([base.matrix, base.matrix[:1]])
    snapshot = NodeSnapshot([*base.names, extra], matrix, max_price=0.5)
    assert (snapshot.padded_items("host") is not None) is padded
    assert (snapshot.padded_items("name") is not None) is padded
    for workload_class in ("standard", "latency-sensitive"):
        body = bench.sample_body(snapshot.names, workload_class)
        expected = filter_result(parse_args(body), snapshot)
        ranked = prioritize_result(parse_args(body), snapshot, Weights())
        for _ in range(3):
            args = parse_args(body, snapshot)
            assert orjson.loads(filter_body(args, snapshot)[0]) == expected
            fast = prioritize_body(args, snapshot, Weights())
            assert orjson.loads(fast) == ranked
            assert json.loads(fast) == ranked  # the standard library's decoder agrees


def test_varied_bench_bodies_never_repeat_a_list_the_cache_could_serve():
    snapshot = bench.synthetic_snapshot(300)
    pairs = bench.varied_bodies(snapshot, 12)
    orders = [tuple(orjson.loads(f)["NodeNames"]) for f, _ in pairs]
    assert len(set(orders)) == len(orders)  # no list comes back
    assert all(sorted(o) == sorted(snapshot.names) for o in orders)
    for i, (filter_raw, prioritize_raw) in enumerate(pairs):
        answer, _ = filter_body(parse_args(filter_raw, snapshot), snapshot)
        assert orjson.loads(prioritize_raw)["NodeNames"] == orjson.loads(answer)["NodeNames"]
        labels = orjson.loads(filter_raw)["Pod"]["metadata"]["labels"]
        assert labels.get(scoring.WORKLOAD_CLASS_LABEL) == bench.CLASSES[i % 4]


@pytest.mark.parametrize(
    "reasons",
    [[], [0], [3, -1, 0, 3, 1], [-1, -1], list(range(-128, 128))],
    ids=["none", "one", "mixed-with-unknown", "only-unknown", "every-int8"],
)
def test_reason_codes_are_the_sorted_distinct_codes(reasons):
    array = np.array(reasons, dtype=np.int8)
    assert reason_codes(array) == np.unique(array).tolist()


def test_a_remembered_quantity_parses_alike_and_a_bad_one_is_refused_every_time():
    assert parse_quantity("250m") == parse_quantity("250m") == Decimal("0.250")
    assert parse_quantity("1Gi") == Decimal(2**30)
    for _ in range(2):
        with pytest.raises(ProtocolError, match="not a Kubernetes quantity"):
            parse_quantity("12 parsecs")
    with pytest.raises(ProtocolError, match="not a number"):
        parse_quantity(True)  # never mistaken for the remembered 1


def test_a_failure_map_gathered_from_pre_encoded_keys_decodes_like_the_joined_one():
    snapshot = bench.synthetic_snapshot(300)
    idx = np.array([5, 9, 5, 299, -1, 0, 17], dtype=np.int64)  # a repeat and an unknown name
    names = [snapshot.names[i] if i >= 0 else "ghost" for i in idx]
    groups = [(np.array([0, 1, 2, 3]), 'a "quoted" reason'), (np.array([4, 5]), "unknown"),
              (np.array([], dtype=np.int64), "none"), (np.array([6]), "last")]  # fmt: skip
    keys = snapshot.padded_items(KEY)
    assert keys is not None
    gathered = encode_map(names, groups, True, keys, idx)
    joined = encode_map(names, groups, True)
    assert (
        orjson.loads(gathered)
        == orjson.loads(joined)
        == {
            "node-00005": 'a "quoted" reason',
            "node-00009": 'a "quoted" reason',
            "node-00299": 'a "quoted" reason',
            "ghost": "unknown",
            "node-00000": "unknown",
            "node-00017": "last",
        }
    )


@pytest.mark.parametrize("workload_class", [LATENCY_SENSITIVE, BATCH], ids=["ls", "batch"])
def test_the_names_a_filter_passes_come_back_to_prioritize_already_resolved(workload_class):
    snapshot = small_snapshot()
    names = snapshot.names[10:250]
    body = body_of(names, workload_class, compact=True)
    passing = orjson.loads(filter_body(parse_args(body, snapshot), snapshot)[0])["NodeNames"]
    assert 32 <= len(passing) < len(names) or workload_class == BATCH
    args = parse_args(body_of(passing, workload_class, compact=True), snapshot)
    # Found by the bytes kube-scheduler writes for the list, not decoded and looked up again.
    assert args.resolution.raw == orjson.dumps(passing)
    assert args.names == passing
    assert args.resolution.idx.tolist() == [snapshot.index[n] for n in passing]
    reference = prioritize_result(
        parse_args(body_of(passing, workload_class, compact=True)), snapshot, Weights()
    )
    assert orjson.loads(prioritize_body(args, snapshot, Weights())) == reference
    # The same names written with spaces are decoded as before, to the same answer.
    spaced = parse_args(body_of(passing, workload_class, compact=False), snapshot)
    assert orjson.loads(prioritize_body(spaced, snapshot, Weights())) == reference
