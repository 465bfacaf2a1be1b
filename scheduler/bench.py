"""Extender benchmark: filter+prioritize latency for N synthetic nodes, in-process and over HTTP."""

from __future__ import annotations

import http.client
import json
import statistics
import time
from typing import Any

import numpy as np
import orjson

from scheduler import scoring
from scheduler.extender.protocol import parse_args
from scheduler.extender.snapshot import NodeSnapshot
from scheduler.extender.verbs import filter_body, prioritize_body


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


CLASSES = (None, scoring.STANDARD, scoring.BATCH, scoring.LATENCY_SENSITIVE)


def varied_bodies(snapshot: NodeSnapshot, lists: int, seed: int = 2) -> list[tuple[bytes, bytes]]:
    """(filter body, prioritize body) pairs over `lists` different orders of the node names, one
    pod class after another, made before anything is timed: no NodeNames list repeats within
    the extender's cache of recent lists, so every call resolves and decodes its names anew."""
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(lists):
        names = [snapshot.names[j] for j in rng.permutation(len(snapshot.names))]
        workload_class = CLASSES[i % len(CLASSES)]
        filter_raw = sample_body(names, workload_class, i)
        answer, _ = filter_body(parse_args(filter_raw, snapshot), snapshot)
        passing = orjson.loads(answer)["NodeNames"]
        pairs.append((filter_raw, sample_body(passing, workload_class, i)))
    return pairs


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
    snapshot: NodeSnapshot, requests: int, weights: scoring.Weights
) -> dict[str, Any]:
    """Per pod: filter, then prioritize of filter's nodes, with the functions the server answers with.

    Parse (against the snapshot, as `extender_call` does), score and encode the
    JSON bodies; no HTTP round trip.
    """
    classes = (None, scoring.STANDARD, scoring.BATCH, scoring.LATENCY_SENSITIVE)
    filter_bodies = [sample_body(snapshot.names, classes[i], i) for i in range(4)]
    prioritize_bodies: dict[int, bytes] = {}
    samples = []
    cpu_samples = []
    for i in range(requests):
        k = i % 4
        t0 = time.perf_counter()
        c0 = time.thread_time()
        raw, _ = filter_body(parse_args(filter_bodies[k], snapshot), snapshot)
        if k not in prioritize_bodies:
            passing = orjson.loads(raw)["NodeNames"]
            prioritize_bodies[k] = sample_body(passing, classes[k], k)
        args = parse_args(prioritize_bodies[k], snapshot)
        prioritize_body(args, snapshot, weights)
        samples.append(time.perf_counter() - t0)
        cpu_samples.append(time.thread_time() - c0)
    out = percentiles(samples)
    # CPU time of the work itself: what a loaded, shared machine does not inflate.
    cpu = percentiles(cpu_samples)
    out["cpu_p50_ms"], out["cpu_p99_ms"] = cpu["p50_ms"], cpu["p99_ms"]
    out["pods_per_second"] = round(requests / sum(samples), 1)
    return out


def bench_http(
    host: str,
    port: int,
    names: list[str],
    requests: int,
    token: str | None,
    varied: list[tuple[bytes, bytes]] | None = None,
) -> dict[str, Any]:
    """filter then prioritize (with filter's NodeNames) per pod over one keep-alive HTTP connection.

    With `varied` (see `varied_bodies`), pod i sends pair i modulo their number instead of the
    same node list every time."""
    classes = CLASSES
    conn = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    samples = []
    filter_cache: dict[int, bytes] = {}
    bodies = [sample_body(names, classes[i % 4], i) for i in range(4)]
    started = time.perf_counter()
    for i in range(requests):
        filter_raw = varied[i % len(varied)][0] if varied else bodies[i % 4]
        t0 = time.perf_counter()
        conn.request("POST", "/scheduler/filter", body=filter_raw, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        if response.status != 200:
            raise RuntimeError(f"filter answered {response.status}: {raw[:200]!r}")
        if varied:
            prioritize_raw = varied[i % len(varied)][1]
        else:
            if i % 4 not in filter_cache:
                passing = orjson.loads(raw)["NodeNames"]
                filter_cache[i % 4] = sample_body(passing, classes[i % 4], i)
            prioritize_raw = filter_cache[i % 4]
        conn.request("POST", "/scheduler/prioritize", body=prioritize_raw, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        if response.status != 200:
            raise RuntimeError(f"prioritize answered {response.status}: {raw[:200]!r}")
        samples.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    conn.close()
    out = percentiles(samples)
    out["pods_per_second"] = round(requests / elapsed, 1)
    return out
