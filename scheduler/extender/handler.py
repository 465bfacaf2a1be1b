"""The extender's HTTP handler, shared by the Django views and the dedicated ASGI app.

`extender_call(verb, body, authorization)` returns (status, JSON bytes). It never
raises for bad input: a malformed body is a 400 with the reason, an oversized
one a 413, a wrong bearer token a 401. kube-scheduler calls it without a user
session, so the Django views are csrf-exempt; docs/scheduler.md says how the
endpoints are protected (NetworkPolicy, mTLS, optional shared token).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings
from django.db import close_old_connections
from prometheus_client import Counter, Histogram

from kiln import heap
from scheduler import selectors
from scheduler.extender.protocol import ProtocolError, error_filter_result, parse_args
from scheduler.extender.snapshot import NodeSnapshot
from scheduler.extender.verbs import filter_body, prioritize_body

FILTER, PRIORITIZE = "filter", "prioritize"
VERBS = (FILTER, PRIORITIZE)

EXTENDER_SECONDS = Histogram(
    "kiln_scheduler_extender_request_duration_seconds",
    "Time to answer one extender call (answered calls; refused ones count in the errors)",
    ["verb"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
)
EXTENDER_ERRORS = Counter(
    "kiln_scheduler_extender_errors_total",
    "Extender calls answered with an error",
    ["verb", "code"],
)
# Bound once: a labelled child looked up per call is measurable at hundreds of calls a second.
_VERB_SECONDS = {verb: EXTENDER_SECONDS.labels(verb) for verb in VERBS}
SPOT_REJECTIONS = Counter(
    "kiln_scheduler_spot_rejections_total",
    "Spot nodes rejected for latency-sensitive pods (FailedAndUnresolvableNodes)",
)


def _error_body(code: str, message: str) -> bytes:
    """Kiln's error shape {code, message, extra} as JSON."""
    return orjson.dumps({"code": code, "message": message, "extra": {}})


def _error(verb: str, status: int, code: str, message: str) -> tuple[int, bytes]:
    """Count and answer a refused call: an ExtenderFilterResult with Error for filter."""
    EXTENDER_ERRORS.labels(verb, code).inc()
    if verb == FILTER:
        body: dict[str, Any] = error_filter_result(message)
        body["code"] = code
        return status, orjson.dumps(body)
    return status, _error_body(code, message)


def authorized(authorization: str | None) -> bool:
    """Whether the call carries the configured shared token (always true when none is configured)."""
    expected = settings.KILN_SCHEDULER_EXTENDER_TOKEN
    if not expected:
        return True
    if not authorization or not authorization.startswith("Bearer "):
        return False
    return hmac.compare_digest(authorization[len("Bearer ") :].encode(), expected.encode())


def extender_call(
    verb: str,
    body: bytes,
    authorization: str | None = None,
    snapshot_source: Callable[[], NodeSnapshot] | None = None,
) -> tuple[int, bytes]:
    """Answer one filter or prioritize call: (HTTP status, JSON body).

    `snapshot_source` defaults to the inventory (`selectors.node_snapshot`); the
    benchmark passes a synthetic one.
    """
    started = time.perf_counter()
    if verb not in VERBS:
        return _error(verb, 404, "not_found", f"unknown extender verb {verb!r}")
    if not authorized(authorization):
        return _error(verb, 401, "not_authenticated", "missing or wrong extender bearer token")
    if len(body) > settings.KILN_SCHEDULER_MAX_BODY_BYTES:
        return _error(
            verb,
            413,
            "too_large",
            f"body of {len(body)} bytes exceeds KILN_SCHEDULER_MAX_BODY_BYTES "
            f"({settings.KILN_SCHEDULER_MAX_BODY_BYTES}); use nodeCacheCapable: true",
        )
    snapshot = (snapshot_source or selectors.node_snapshot)()
    try:
        # With the snapshot, a candidate list seen before is neither decoded nor looked up again.
        args = parse_args(body, snapshot)
    except ProtocolError as exc:
        return _error(verb, 400, "malformed", str(exc))
    if verb == FILTER:
        payload, unresolvable = filter_body(args, snapshot)
        if unresolvable:
            SPOT_REJECTIONS.inc(unresolvable)
    else:
        payload = prioritize_body(args, snapshot, selectors.scoring_weights())
    _VERB_SECONDS[verb].observe(time.perf_counter() - started)
    return 200, payload


def _threaded_call(*args: Any) -> tuple[int, bytes]:
    """`extender_call` in a worker thread, framed as Django frames a request: a connection the
    database dropped (a restart) is closed before and after, not reused by every later call."""
    close_old_connections()
    try:
        return extender_call(*args)
    finally:
        close_old_connections()


class ExtenderASGI:
    """A minimal ASGI app serving POST /scheduler/filter and /scheduler/prioritize (and /healthz).

    It skips Django's middleware stack (kube-scheduler waits on every call) but
    answers through the same `extender_call` as the Django views; a call that
    needs the ORM (stale snapshot) runs in a worker thread, the rest inline.
    """

    PATHS = {"/scheduler/filter": FILTER, "/scheduler/prioritize": PRIORITIZE}

    def __init__(self, snapshot_source: Callable[[], NodeSnapshot] | None = None) -> None:
        self.snapshot_source = snapshot_source

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    # Everything loaded so far (Django, numpy, the app) lives as long as the
                    # process: keep it out of the collector, so no full collection walks it
                    # while kube-scheduler waits.
                    heap.freeze_after()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path = scope["path"].rstrip("/") or "/"
        if path == "/healthz":
            await self._send(send, 200, b'{"status":"ok"}')
            return
        verb = self.PATHS.get(path)
        if verb is None:
            await self._send(send, 404, _error_body("not_found", "no such endpoint"))
            return
        if scope["method"] != "POST":
            await self._send(send, 405, _error_body("method_not_allowed", "use POST"))
            return
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        limit = settings.KILN_SCHEDULER_MAX_BODY_BYTES
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= limit + 1:
                chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        source = self.snapshot_source
        if source is None and (fresh := selectors.node_snapshot_if_fresh()) is not None:
            source = lambda: fresh  # noqa: E731 - the snapshot checked fresh, not a second look
        if source is not None:
            # Pure CPU work on cached arrays: a thread hop would only add latency.
            status, payload = extender_call(verb, body, headers.get("authorization"), source)
        else:
            status, payload = await asyncio.to_thread(
                _threaded_call, verb, body, headers.get("authorization"), self.snapshot_source
            )
        await self._send(send, status, payload)

    @staticmethod
    async def _send(send, status: int, payload: bytes) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
