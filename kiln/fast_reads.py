"""Public, read-only GETs answered in one thread hop beside Django's middleware stack.

Under ASGI, Django runs a request through its middleware with a thread hop at each change
between synchronous and asynchronous code (our stack has several), then the view in a
thread again; for a read as small as a tile those hops were most of the request
(docs/audit.md has the before and after of audit_tlog_bench). A view class whose answer needs none of that (no session,
user, CSRF or cookie: public bytes for anyone, such as the transparency log's tiles and
proofs) may say so with a class method

    fast_read(query: QueryDict, **url_kwargs) -> HttpResponse | None

and `FastReads` answers its GETs directly: the path is resolved with the project's own
URLconf, the method runs in one of a few read threads (each keeping its database connection
between reads, below), the security headers the middleware would add are
added, the request is counted in the same metrics, and the response is sent. `None` from
the method (for example: the read is not public in this deployment) hands the request to
Django as usual, and so does a failure (a read changes nothing, so Django answers it again,
with its 503 for a database that is down), and anything unusual: another method, a host not allowed, a
redirect to HTTPS due, a path the URLconf does not resolve to such a view.

Kept for the tile and inclusion-proof p99 <= 5 ms over HTTP (docs/audit.md). Alternated with
and without (`KILN_FAST_READS=0`: through Django) on the shared machine
(`bench/results/audit_tlog_bench-fast-reads-2026-12-06.json`): a tile's median 0.98 against
4.91 ms and an inclusion proof's 2.65 against 7.05 ms, so without it the median alone is at
or over the target.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.http import HttpResponse, QueryDict
from django.http.request import split_domain_port, validate_host
from django.urls import Resolver404, resolve

from kiln.observability import HTTP_LATENCY, HTTP_REQUESTS

log = logging.getLogger(__name__)


def security_headers(*, secure: bool) -> list[tuple[str, str]]:
    """The headers Kiln's middleware adds to every response (SecurityMiddleware, CSP,
    X-Frame-Options), for a response that does not pass through it."""
    headers = []
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append(("X-Content-Type-Options", "nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        headers.append(("Referrer-Policy", settings.SECURE_REFERRER_POLICY))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append(("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
    if secure and settings.SECURE_HSTS_SECONDS:
        hsts = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            hsts += "; includeSubDomains"
        if settings.SECURE_HSTS_PRELOAD:
            hsts += "; preload"
        headers.append(("Strict-Transport-Security", hsts))
    if settings.CONTENT_SECURITY_POLICY:
        headers.append(("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY))
    headers.append(("Permissions-Policy", "camera=(), microphone=(), geolocation=()"))
    headers.append(("X-Frame-Options", settings.X_FRAME_OPTIONS))
    return headers


def _host_allowed(scope: dict) -> bool:
    host = next((v for k, v in scope.get("headers", []) if k == b"host"), None)
    if host is None:
        return False
    domain, _ = split_domain_port(host.decode("latin-1"))
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)


def _fast_view(scope: dict) -> tuple[Any, dict, str] | None:
    """(view class, URL kwargs, route) when this request is a fast read's, else None."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return None
    secure = scope.get("scheme") == "https"
    if settings.SECURE_SSL_REDIRECT and not secure:
        return None
    try:
        match = resolve(scope["path"])
    except (Resolver404, UnicodeError, ValueError):
        return None
    view_class = getattr(match.func, "view_class", None)
    if getattr(view_class, "fast_read", None) is None or not _host_allowed(scope):
        return None
    return view_class, match.kwargs, match.route or "unmatched"


# The threads that answer fast reads. Each keeps the database connection it opened (one of
# the pool's, KILN_DB_POOL_MAX) from read to read instead of returning it after each, as Django
# does after a request: a return costs the pool's reset (two statements) and the next borrow
# its liveness check (a round trip), more than a tile read itself. A connection that failed
# is closed (the next read opens another), as Django closes one after a request.
READ_THREADS = 2
_EXECUTOR = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="kiln-fast-read")


def release_connections() -> None:
    """Close the connection each read thread keeps (at shutdown, or when a test ends)."""
    barrier = threading.Barrier(READ_THREADS)

    def close() -> None:
        barrier.wait(timeout=10)  # every read thread takes one of these at once
        connections.close_all()

    for done in [_EXECUTOR.submit(close) for _ in range(READ_THREADS)]:
        done.result()


def _answer(view_class: Any, query: bytes, kwargs: dict) -> HttpResponse | None:
    """The view's fast answer in a read thread, on the connection that thread keeps."""
    try:
        return view_class.fast_read(QueryDict(query.decode("latin-1")), **kwargs)
    finally:
        for conn in connections.all(initialized_only=True):
            if conn.connection is None:
                continue
            if not conn.get_autocommit() or (conn.errors_occurred and not conn.is_usable()):
                conn.close()  # back to the pool, or gone; the next read opens another
            else:
                conn.errors_occurred = False


class FastReads:
    """ASGI middleware in front of Django's HTTP application (kiln/asgi.py)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        found = _fast_view(scope)
        if found is None:
            return await self.app(scope, receive, send)
        view_class, kwargs, route = found
        started = time.perf_counter()
        try:
            response = await sync_to_async(_answer, thread_sensitive=False, executor=_EXECUTOR)(
                view_class, scope.get("query_string", b""), kwargs
            )
        except Exception:  # noqa: BLE001 - a read changes nothing: Django answers it (503, 500)
            log.warning("fast read of %s failed; answered through Django", route, exc_info=True)
            response = None
        if response is None:
            return await self.app(scope, receive, send)
        body = response.content
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
        names = {k.lower() for k, _ in response.items()}
        for name, value in security_headers(secure=scope.get("scheme") == "https"):
            if name.lower() not in names:
                headers.append((name.encode("latin-1"), value.encode("latin-1")))
        if "content-length" not in names:
            headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": headers})  # fmt: skip
        await send({"type": "http.response.body", "body": body})
        HTTP_LATENCY.labels("GET", route).observe(time.perf_counter() - started)
        HTTP_REQUESTS.labels("GET", route, str(response.status_code)).inc()
