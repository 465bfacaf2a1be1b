"""The dedicated extender ASGI app (scheduler_extender) answers through the same code as the views."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench.scheduler import extender as bench
from scheduler import selectors
from scheduler.extender.handler import ExtenderASGI
from scheduler.extender.protocol import parse_args
from scheduler.extender.verbs import filter_result
from scheduler.scoring import Weights
from tests.scheduler.conftest import pod

pytestmark = pytest.mark.django_db(transaction=True)


def call(
    app: ExtenderASGI, method: str, path: str, body: bytes = b"", headers=()
) -> tuple[int, bytes]:
    """Drive the ASGI app with one HTTP request (body in two chunks) and collect the response."""
    chunks = [body[: len(body) // 2], body[len(body) // 2 :]]
    sent: list[dict] = []

    async def receive():
        chunk = chunks.pop(0) if chunks else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": list(headers)}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_asgi_filter_and_prioritize(inventory):
    app = ExtenderASGI()
    body = json.dumps({"Pod": pod(None), "NodeNames": ["node-od", "node-spot"]}).encode()
    status, raw = call(app, "POST", "/scheduler/filter", body)
    assert status == 200
    result = json.loads(raw)
    assert result["NodeNames"] == ["node-od"]
    assert list(result["FailedAndUnresolvableNodes"]) == ["node-spot"]
    status, raw = call(app, "POST", "/scheduler/prioritize", body)
    assert status == 200
    assert [e["Host"] for e in json.loads(raw)] == ["node-od", "node-spot"]


def test_asgi_answers_from_its_snapshot_source_not_the_inventory(inventory):
    """The benchmark server's synthetic nodes are what filter and prioritize see."""
    snapshot = bench.synthetic_snapshot(400)
    app = ExtenderASGI(lambda: snapshot)
    body = bench.sample_body(snapshot.names, "batch")
    status, raw = call(app, "POST", "/scheduler/filter", body)
    assert status == 200
    result = json.loads(raw)
    known = set(snapshot.names)
    assert result["NodeNames"] and set(result["NodeNames"]) <= known
    assert "node is not in kiln's inventory" not in result["FailedNodes"].values()
    assert len(result["NodeNames"]) + len(result["FailedNodes"]) == 400
    status, raw = call(app, "POST", "/scheduler/prioritize", body)
    scores = json.loads(raw)
    assert status == 200 and len(scores) == 400
    assert max(e["Score"] for e in scores) > 0


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/scheduler/filter", b"", 405),
        ("POST", "/scheduler/bind", b"{}", 404),
        ("POST", "/scheduler/filter", b"{broken", 400),
        ("GET", "/healthz", b"", 200),
    ],
    ids=["get", "unknown-verb", "malformed", "health"],
)
def test_asgi_edges(inventory, method, path, body, status):
    got, raw = call(ExtenderASGI(), method, path, body)
    assert got == status
    assert json.loads(raw)  # always a JSON body


def test_asgi_enforces_the_token(inventory, settings):
    settings.KILN_SCHEDULER_EXTENDER_TOKEN = "tok"
    body = json.dumps({"Pod": pod("batch"), "NodeNames": ["node-od"]}).encode()
    assert call(ExtenderASGI(), "POST", "/scheduler/filter", body)[0] == 401
    status, _ = call(
        ExtenderASGI(), "POST", "/scheduler/filter", body, [(b"authorization", b"Bearer tok")]
    )
    assert status == 200


def test_bench_in_process_measures_real_calls():
    snapshot = bench.synthetic_snapshot(300)
    result = bench.bench_in_process(snapshot, 8, Weights())
    assert set(result) == {
        "p50_ms",
        "p99_ms",
        "mean_ms",
        "pods_per_second",
        "cpu_p50_ms",
        "cpu_p99_ms",
    }
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert 0 < result["cpu_p50_ms"] <= result["cpu_p99_ms"]
    # The synthetic cluster is half spot, so a latency-sensitive pod loses about half the nodes.
    body = bench.sample_body(snapshot.names, None)
    result = filter_result(parse_args(body), snapshot)
    spot = int(snapshot.matrix[:, 8].sum())
    assert len(result["FailedAndUnresolvableNodes"]) == spot


def test_a_fresh_snapshot_is_answered_inline_from_the_one_it_checked(
    inventory, settings, monkeypatch
):
    """The snapshot found fresh is the one answered from: expiring between the check and the call
    (a database read in the event loop: SynchronousOnlyOperation, a 500) cannot happen."""
    settings.KILN_SCHEDULER_SNAPSHOT_TTL_SECONDS = 60.0
    checked = selectors.node_snapshot()  # cached, fresh for a minute

    def expired():
        raise AssertionError("the inventory was read again after the freshness check")

    monkeypatch.setattr(selectors, "node_snapshot", expired)
    body = json.dumps({"Pod": pod("batch"), "NodeNames": checked.names}).encode()
    for path in ("/scheduler/filter", "/scheduler/prioritize"):
        status, raw = call(ExtenderASGI(), "POST", path, body)
        assert status == 200, raw
    assert selectors.node_snapshot_if_fresh() is checked
    selectors.snapshot_invalidate()
    assert selectors.node_snapshot_if_fresh() is None  # stale: the call goes to a worker thread
