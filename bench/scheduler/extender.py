"""Extender benchmark: filter+prioritize latency for N synthetic nodes, in-process and over HTTP.

Every measurement runs over the same list of (filter body, prioritize body) pairs,
made before anything is timed (`node_list_bodies`): `same` lists repeat one
candidate list per pod class, as a stable cluster scored in full does; `varied`
lists differ on every call, as kube-scheduler's sampling makes them. A list holds
every node, or `size` of them (kube-scheduler's adaptive `percentageOfNodesToScore`
sends about 5% of a 12,477-node cluster: `kubedefault.num_feasible_nodes_to_find`).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from scheduler import scoring
from scheduler.extender.client import HttpExtender
from scheduler.extender.protocol import parse_args
from scheduler.extender.snapshot import NodeSnapshot
from scheduler.extender.verbs import filter_body, prioritize_body

CLASSES = (None, scoring.STANDARD, scoring.BATCH, scoring.LATENCY_SENSITIVE)
Pairs = list[tuple[bytes, bytes]]


def synthetic_snapshot(nodes: int, seed: int = 1) -> NodeSnapshot:
    """N nodes of a few shapes, half spot, random utilisation and prices (one in 50 unpriced)."""
    rng = np.random.default_rng(seed)
    shapes = np.array([(2, 8), (4, 16), (8, 32), (16, 64)], dtype=np.float64)
    pick = shapes[rng.integers(0, len(shapes), nodes)]
    matrix = np.zeros((nodes, len(scoring.NodeArrays.COLUMNS)))
    matrix[:, 0] = pick[:, 0]
    matrix[:, 1] = pick[:, 1] * 2**30
    matrix[:, 3] = matrix[:, 0] * rng.uniform(0, 0.9, nodes)
    matrix[:, 4] = matrix[:, 1] * rng.uniform(0, 0.9, nodes)
    spot = rng.random(nodes) < 0.5
    matrix[:, 6] = pick[:, 0] * 0.048 * np.where(spot, 0.35, 1.0)
    matrix[rng.random(nodes) < 0.02, 6] = np.nan
    matrix[:, 7] = np.where(spot, rng.choice([0.1, 0.3, 0.5, 0.7, 1.0], nodes), 0.0)
    matrix[:, 8] = spot
    return NodeSnapshot([f"node-{i:05d}" for i in range(nodes)], matrix)


def sample_body(names: list[str], workload_class: str | None, i: int = 0) -> bytes:
    """An ExtenderArgs body (nodeCacheCapable: true) shaped like kube-scheduler's."""
    labels = {"app": f"bench-{i}"}
    if workload_class:
        labels[scoring.WORKLOAD_CLASS_LABEL] = workload_class
    pod = {
        "metadata": {"name": f"bench-{i}", "namespace": "default", "labels": labels},
        "spec": {
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}
            ]
        },
    }
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()


def node_list_bodies(
    snapshot: NodeSnapshot,
    *,
    lists: int,
    size: int | None = None,
    varied: bool = True,
    seed: int = 2,
) -> Pairs:
    """(filter body, prioritize body) pairs, one pod class after another.

    Each filter body names `size` nodes (all when None): `varied`, the first `size`
    of a new random order per pair, so no list repeats within the extender's cache
    of recent lists; otherwise the first `size` names of the snapshot every time.
    The prioritize body names what filter passed, as kube-scheduler sends it.
    """
    rng = np.random.default_rng(seed)
    count = len(snapshot.names) if size is None else min(size, len(snapshot.names))
    pairs = []
    for i in range(lists):
        order = rng.permutation(len(snapshot.names))[:count] if varied else range(count)
        names = [snapshot.names[j] for j in order]
        workload_class = CLASSES[i % len(CLASSES)]
        filter_raw = sample_body(names, workload_class, i)
        answer, _ = filter_body(parse_args(filter_raw, snapshot), snapshot)
        passing = orjson.loads(answer)["NodeNames"]
        pairs.append((filter_raw, sample_body(passing, workload_class, i)))
    return pairs


def varied_bodies(snapshot: NodeSnapshot, lists: int, seed: int = 2) -> Pairs:
    """`node_list_bodies` over every node, a different order per pair."""
    return node_list_bodies(snapshot, lists=lists, varied=True, seed=seed)


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p99/mean of latencies in seconds, reported in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(p99 * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
    }


def bench_in_process(
    snapshot: NodeSnapshot, requests: int, weights: scoring.Weights, pairs: Pairs | None = None
) -> dict[str, Any]:
    """Per pod: filter, then prioritize of filter's nodes, with the functions the server answers with.

    Parse (against the snapshot, as `extender_call` does), score and encode the
    JSON bodies; no HTTP round trip. Pod i sends pair i modulo their number
    (default: every node, the same list per pod class).
    """
    pairs = pairs or node_list_bodies(snapshot, lists=len(CLASSES), varied=False)
    samples = []
    cpu_samples = []
    for i in range(requests):
        filter_raw, prioritize_raw = pairs[i % len(pairs)]
        t0 = time.perf_counter()
        c0 = time.thread_time()
        filter_body(parse_args(filter_raw, snapshot), snapshot)
        prioritize_body(parse_args(prioritize_raw, snapshot), snapshot, weights)
        samples.append(time.perf_counter() - t0)
        cpu_samples.append(time.thread_time() - c0)
    out = percentiles(samples)
    # CPU time of the work itself: what a loaded, shared machine does not inflate.
    cpu = percentiles(cpu_samples)
    out["cpu_p50_ms"], out["cpu_p99_ms"] = cpu["p50_ms"], cpu["p99_ms"]
    out["pods_per_second"] = round(requests / sum(samples), 1)
    return out


def parse_floor(pairs: Pairs, requests: int) -> dict[str, Any]:
    """The JSON parse floor per pod: decoding its filter and prioritize bodies, nothing else.

    No extender can answer faster than it reads its request; orjson is the decoder
    the extender uses, the standard library's `json` is beside it for scale.
    """
    out: dict[str, Any] = {}
    decoders: dict[str, Callable[[bytes], Any]] = {"orjson": orjson.loads, "json": json.loads}
    for name, loads in decoders.items():
        samples = []
        for i in range(requests):
            filter_raw, prioritize_raw = pairs[i % len(pairs)]
            t0 = time.perf_counter()
            loads(filter_raw)
            loads(prioritize_raw)
            samples.append(time.perf_counter() - t0)
        out[name] = percentiles(samples)
    return out


def bench_http(
    host: str, port: int, pairs: Pairs, requests: int, token: str | None
) -> dict[str, Any]:
    """filter then prioritize per pod over one keep-alive HTTP connection; pod i sends pair i mod len.

    The client is the simulated kube-scheduler's (`HttpExtender`, a lean HTTP/1.1 client as
    Go's is), so the figure is the extender's round trip, not Python's `http.client` parsing
    each response's headers.
    """
    client = HttpExtender(host, port, token=token or "")
    samples = []
    started = time.perf_counter()
    for i in range(requests):
        filter_raw, prioritize_raw = pairs[i % len(pairs)]
        t0 = time.perf_counter()
        for verb, body in (("filter", filter_raw), ("prioritize", prioritize_raw)):
            status, raw = client(verb, body)
            if status != 200:
                raise RuntimeError(f"/scheduler/{verb} answered {status}: {raw[:200]!r}")
        samples.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    client.close()
    out = percentiles(samples)
    out["pods_per_second"] = round(requests / elapsed, 1)
    return out
