"""The web's ASGI handler: one synchronous middleware chain, run whole in the request's thread,
answering as Django's own handler does (kiln/asgi_handler.py)."""

from __future__ import annotations

import asyncio
import threading
import warnings

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction
from asgiref.testing import ApplicationCommunicator
from django.contrib.staticfiles import finders
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpResponse
from django.test import override_settings
from django.urls import path

from kiln import asgi_handler
from kiln.asgi_handler import OneThreadASGIHandler
from kiln.streaming import CHUNK_BYTES

BUNDLE = "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"  # 1.5 MB: many chunks
SEEN: list[tuple[str, int]] = []  # (who, thread) in the order each ran


class OuterRecorder:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        SEEN.append(("outer", threading.get_ident()))
        return self.get_response(request)


class InnerRecorder(OuterRecorder):
    def __call__(self, request):
        SEEN.append(("inner", threading.get_ident()))
        return self.get_response(request)


class BothModes:
    """A middleware that can run either way, as Axes can: innermost, Django's handler runs it on
    the event loop (it wraps Django's asynchronous last step)."""

    sync_capable = async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        SEEN.append(("both", threading.get_ident()))
        return self.get_response(request)  # a coroutine when it runs async: awaited by the caller


def recording_view(request):
    SEEN.append(("view", threading.get_ident()))
    return HttpResponse("seen")


def failing_view(request):
    raise RuntimeError("a bug in a view")


urlpatterns = [path("seen", recording_view), path("fails", failing_view)]
# Innermost, the one that can go async sits where Axes does in Kiln's list.
RECORDING = [f"{__name__}.OuterRecorder", f"{__name__}.InnerRecorder", f"{__name__}.BothModes"]


def _get(app, url: str) -> tuple[int, dict[bytes, bytes], list[bytes]]:
    """GET `url` through the ASGI `app`: (status, headers, the body messages' bytes)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": url, "raw_path": url.encode(), "query_string": b"",
        "root_path": "", "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000), "server": ("testserver", 80),
    }  # fmt: skip

    async def exchange():
        communicator = ApplicationCommunicator(app, scope)
        await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await communicator.receive_output(timeout=30)
        chunks = []
        while True:
            message = await communicator.receive_output(timeout=30)
            if message.get("body"):
                chunks.append(message["body"])
            if not message.get("more_body"):
                break
        await communicator.wait(timeout=30)
        return start["status"], dict(start["headers"]), chunks

    return async_to_sync(exchange)()


def test_the_middleware_chain_is_synchronous_where_djangos_is_asynchronous():
    assert not asyncio.iscoroutinefunction(OneThreadASGIHandler()._middleware_chain)
    assert asyncio.iscoroutinefunction(ASGIHandler()._middleware_chain)


@override_settings(ROOT_URLCONF=__name__, MIDDLEWARE=RECORDING)
def test_every_middleware_and_the_view_run_in_one_thread_off_the_event_loop():
    SEEN.clear()
    status, _headers, body = _get(OneThreadASGIHandler(), "/seen")
    assert status == 200 and b"".join(body) == b"seen"
    assert [who for who, _ in SEEN] == ["outer", "inner", "both", "view"]
    assert len({thread for _, thread in SEEN}) == 1
    assert SEEN[0][1] != threading.get_ident()  # not this test's thread either


@override_settings(ROOT_URLCONF=__name__, MIDDLEWARE=RECORDING)
def test_djangos_handler_runs_a_middleware_that_can_go_async_on_the_event_loop():
    # What the handler saves: Django's own leaves the request's thread for that middleware
    # (and Django's innermost step) and comes back for the view.
    SEEN.clear()
    status, _headers, _body = _get(ASGIHandler(), "/seen")
    threads = dict(SEEN)
    assert status == 200 and threads["both"] != threads["outer"] == threads["view"]


@override_settings(ROOT_URLCONF=__name__)
def test_an_exception_in_a_view_is_a_500_page_as_under_django():
    status, headers, body = _get(OneThreadASGIHandler(), "/fails")
    assert status == 500
    assert b"".join(body)  # the error page, not an empty answer


def test_a_static_file_still_streams_in_chunks_without_djangos_warning():
    with open(finders.find(BUNDLE), "rb") as f:
        expected = f.read()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        status, _headers, chunks = _get(OneThreadASGIHandler(), f"/static/{BUNDLE}")
    assert status == 200 and b"".join(chunks) == expected
    assert len(chunks) >= len(expected) // CHUNK_BYTES


def test_the_api_answers_a_request_without_credentials_with_its_reason():
    status, headers, body = _get(OneThreadASGIHandler(), "/api/v1/environments/")
    assert status in (401, 403)
    assert b"credentials" in b"".join(body).lower()


@pytest.mark.parametrize(
    ("one_thread", "kind"), [(True, OneThreadASGIHandler), (False, ASGIHandler)]
)
def test_the_setting_chooses_the_handler(settings, one_thread, kind):
    settings.KILN_WEB_ONE_THREAD = one_thread
    assert type(asgi_handler.get_asgi_application()) is kind
