"""Public reads answered beside Django's middleware (kiln/fast_reads.py): the same status, bytes
and security headers as through Django, and Django answers everything else."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.testing import ApplicationCommunicator
from django.db import connection, connections

from audit.tree import api as tree_api
from kiln import fast_reads
from kiln.asgi import django_asgi_app
from kiln.fast_reads import READ_THREADS, FastReads, release_connections
from kiln.observability import HTTP_REQUESTS

pytestmark = pytest.mark.usefixtures("committed_chain", "log300", "read_threads_released")


@pytest.fixture
def read_threads_released():
    """The read threads keep their connections between reads: closed when the test ends, so
    the chain can be wiped and the test database dropped."""
    yield
    release_connections()


SECURITY = (
    "x-content-type-options", "referrer-policy", "cross-origin-opener-policy",
    "content-security-policy", "permissions-policy", "x-frame-options",
)  # fmt: skip
READS = (
    "/audit/tlog/tile/0/000",
    "/audit/tlog/tile/0/001.p/44",
    "/audit/tlog/tile/1/000.p/1",
    "/audit/tlog/tile/entries/000",
    "/api/v1/audit/proofs/inclusion?seq=17&size=300",
    "/api/v1/audit/proofs/inclusion?seq=299",
    "/api/v1/audit/proofs/consistency?from=100&to=300",
    # Refusals: the API's error shape with its reason, through either path.
    "/api/v1/audit/proofs/inclusion?seq=301&size=300",
    "/api/v1/audit/proofs/inclusion?seq=abc",
    "/api/v1/audit/proofs/inclusion",
    "/api/v1/audit/proofs/consistency?from=300&to=100",
    "/audit/tlog/tile/0/x1/2/3",
    "/audit/tlog/tile/99/000",
    "/audit/tlog/tile/0/002",
)


def _call(app, path: str, *, method: str = "GET", host: bytes = b"testserver",
          scheme: str = "http") -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    route, _, query = path.partition("?")
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": scheme, "path": route, "raw_path": route.encode(), "root_path": "",
        "query_string": query.encode(), "headers": [(b"host", host)],
        "client": ("127.0.0.1", 1), "server": ("testserver", 80),
    }  # fmt: skip

    async def run():
        app_io = ApplicationCommunicator(app, scope)
        await app_io.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await app_io.receive_output(30)
        body = b""
        while True:
            message = await app_io.receive_output(30)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await app_io.wait(5)
        headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
        return start["status"], headers, body

    return asyncio.run(run())


class Counting:
    """The Django application, counting what reaches it."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        await django_asgi_app(scope, receive, send)


@pytest.mark.parametrize("path", READS)
def test_a_public_read_is_the_same_beside_django_as_through_it(path, settings):
    settings.KILN_AUDIT_TLOG_PUBLIC = True
    django = Counting()
    status, headers, body = _call(FastReads(django), path)
    assert django.calls == 0, "answered beside Django"
    d_status, d_headers, d_body = _call(django_asgi_app, path)
    assert (status, body) == (d_status, d_body)
    assert headers["content-type"] == d_headers["content-type"]
    assert headers.get("cache-control") == d_headers.get("cache-control")
    assert int(headers["content-length"]) == len(body)
    for name in SECURITY:
        assert headers[name] == d_headers[name], name
    assert status == 200 or body.startswith(b'{"code":'), body[:200]


def test_each_security_header_django_adds_is_added_beside_it(settings):
    """A header a middleware starts adding must be added on the fast path too."""
    settings.KILN_AUDIT_TLOG_PUBLIC = True
    _, headers, _ = _call(FastReads(Counting()), READS[0])
    _, d_headers, _ = _call(django_asgi_app, READS[0])
    ignored = {"vary", "content-length", "date", "server", "cookie", "set-cookie"}
    assert set(d_headers) - ignored <= set(headers)


def test_hsts_is_sent_over_https_only(settings):
    settings.KILN_AUDIT_TLOG_PUBLIC = True
    settings.SECURE_HSTS_SECONDS = 600
    app = FastReads(Counting())
    assert "strict-transport-security" not in _call(app, READS[0])[1]
    https = _call(app, READS[0], scheme="https")[1]
    assert https["strict-transport-security"].startswith("max-age=600")


@pytest.mark.parametrize(
    ("why", "kwargs", "path"),
    [
        ("the log is for auditors only", {}, READS[0]),
        ("not a GET", {"method": "POST"}, READS[0]),
        ("a host not allowed", {"host": b"evil.example"}, READS[0]),
        ("no fast read on this view", {}, "/audit/tlog/checkpoint"),
        ("no such path", {}, "/audit/tlog/nothing"),
        ("a page", {}, "/audit/"),
    ],
)
def test_anything_else_goes_through_django(why, kwargs, path, settings):
    settings.KILN_AUDIT_TLOG_PUBLIC = why != "the log is for auditors only"
    django = Counting()
    status, _, body = _call(FastReads(django), path, **kwargs)
    assert django.calls == 1, why
    assert (status, body) == _call(django_asgi_app, path, **kwargs)[:3:2]
    if why == "the log is for auditors only":
        assert status in (401, 403)
    if why == "a host not allowed":
        assert status == 400


def test_a_failing_read_is_answered_by_django(settings, monkeypatch):
    settings.KILN_AUDIT_TLOG_PUBLIC = True

    def broken(cls, query, **kwargs):
        raise RuntimeError("database gone")

    monkeypatch.setattr(tree_api.TlogTileApi, "fast_read", classmethod(broken))
    django = Counting()
    status, _, body = _call(FastReads(django), READS[0])
    assert django.calls == 1
    assert status == 200 and len(body) == 256 * 32


def test_fast_reads_are_counted_by_route(settings):
    settings.KILN_AUDIT_TLOG_PUBLIC = True
    labels = ("GET", "audit/tlog/tile/<int:level>/<path:rest>", "200")
    before = HTTP_REQUESTS.labels(*labels)._value.get()
    _call(FastReads(Counting()), READS[0])
    assert HTTP_REQUESTS.labels(*labels)._value.get() == before + 1


def test_a_read_thread_keeps_its_connection_and_drops_a_broken_one(settings):
    """Kept between reads (no pool return and check each time); a connection that broke under
    a read is closed, the read answered by Django, and the next fast read works again."""
    settings.KILN_AUDIT_TLOG_PUBLIC = True
    app = FastReads(Counting())

    def kept_sessions() -> dict[int, int]:
        """The server session each read thread holds, by thread (absent: no connection)."""
        barrier = threading.Barrier(READ_THREADS)

        def pid() -> tuple[int, int | None]:
            barrier.wait(timeout=10)  # one call per read thread
            raw = connections["default"].connection
            return threading.get_ident(), raw.info.backend_pid if raw is not None else None

        calls = [fast_reads._EXECUTOR.submit(pid) for _ in range(READ_THREADS)]
        return {thread: pid for thread, pid in (f.result() for f in calls) if pid is not None}

    for _ in range(6):
        assert _call(app, READS[0])[0] == 200
    before = kept_sessions()
    assert 1 <= len(before) <= READ_THREADS
    for _ in range(6):
        assert _call(app, READS[0])[0] == 200
    after = kept_sessions()
    # A thread that held a session holds the same one: none returned or opened per read. (A
    # thread the executor had not used yet may have opened its first since.)
    assert {thread: after.get(thread) for thread in before} == before
    kept = set(after.values())
    with connection.cursor() as cursor:  # what a restart of PostgreSQL does to them
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [list(kept)]
        )
    django = Counting()
    # The executor hands each read to whichever thread is free, so a thread may not read at all
    # for a while and keep its broken connection until it does: each broken connection costs
    # one answer through Django when its thread next reads, and then fast reads work again.
    beside = 0
    for _ in range(8 * READ_THREADS):
        calls = django.calls
        status, _, body = _call(FastReads(django), READS[0])
        assert status == 200 and len(body) == 256 * 32
        beside += django.calls == calls
    assert 1 <= django.calls <= len(kept)  # each broken connection once, then closed
    assert beside >= 8 * READ_THREADS - len(kept)  # every other read beside Django, on a new one
