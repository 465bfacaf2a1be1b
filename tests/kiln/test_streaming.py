"""Streamed responses under ASGI: static files and exports are read in chunks, never with
Django's "must consume synchronous iterators" warning (which also buffers the body whole)."""

from __future__ import annotations

import warnings

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.staticfiles import finders
from django.test import AsyncClient, Client, override_settings

from kiln.streaming import CHUNK_BYTES, in_request_thread

BUNDLE = "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"  # 1.5 MB: many chunks


def _static_bytes(name: str) -> bytes:
    with open(finders.find(name), "rb") as f:
        return f.read()


def _fetch_under_asgi(path: str) -> tuple[int, dict, list[bytes]]:
    """GET `path` through Django's ASGI handler and iterate the body as it does (`aiter`)."""

    async def fetch():
        response = await AsyncClient().get(path)
        chunks = [chunk async for chunk in response]
        return response.status_code, dict(response.items()), chunks

    return async_to_sync(fetch)()


def test_a_static_file_under_asgi_streams_in_chunks_without_the_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning is a failure here
        status, headers, chunks = _fetch_under_asgi(f"/static/{BUNDLE}")
    body = _static_bytes(BUNDLE)
    assert status == 200 and b"".join(chunks) == body
    assert int(headers["Content-Length"]) == len(body)
    # Read a chunk at a time, not whole: every chunk but the last is about CHUNK_BYTES.
    assert len(chunks) >= len(body) // CHUNK_BYTES
    assert all(CHUNK_BYTES <= len(c) < CHUNK_BYTES + 8192 for c in chunks[:-1])


def test_without_the_middleware_django_warns_and_buffers_the_file_whole():
    # Why kiln.streaming exists: WhiteNoise hands ASGI a sync file iterator.
    others = [m for m in settings.MIDDLEWARE if m != "kiln.streaming.AsyncStreamingMiddleware"]
    with override_settings(MIDDLEWARE=others):
        with pytest.warns(Warning, match="must consume synchronous iterators"):
            status, _headers, chunks = _fetch_under_asgi("/static/kiln/kiln.css")
    assert status == 200 and b"".join(chunks) == _static_bytes("kiln/kiln.css")


def test_under_wsgi_a_streamed_file_is_left_as_it_is():
    response = Client().get("/static/kiln/kiln.css")
    assert response.streaming and not response.is_async
    assert b"".join(response.streaming_content) == _static_bytes("kiln/kiln.css")


def test_parts_are_joined_into_chunks_of_about_chunk_bytes():
    parts = [b"x" * 1000] * 200  # 200,000 bytes
    chunks = async_to_sync(_collect)(in_request_thread(parts))
    # 66 parts reach 66,000 >= 65,536 bytes: three chunks of 66 parts, then the last 2.
    assert [len(c) for c in chunks] == [66_000, 66_000, 66_000, 2_000]


def test_an_empty_body_yields_no_chunk():
    assert async_to_sync(_collect)(in_request_thread([])) == []


async def _collect(stream) -> list[bytes]:
    return [chunk async for chunk in stream]
