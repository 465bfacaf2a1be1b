"""Streamed responses under ASGI: a synchronous iterator served as an asynchronous one.

Django's ASGI handler iterates a streaming response asynchronously; handed a sync
iterator (a static file WhiteNoise serves, an audit export's lines) it warns
("StreamingHttpResponse must consume synchronous iterators in order to serve them
asynchronously") and reads the whole body into memory before sending a byte.
`AsyncStreamingMiddleware` gives every such response an async iterator instead, which
reads the sync one in the request's own thread (Django's thread-sensitive executor: a
database transaction the iterator holds spans every read, as it would under WSGI) about
`CHUNK_BYTES` at a time, so memory stays bounded and a client sees bytes as they come.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponseBase

# Bytes read per hop to the request's thread: a hop costs tens of microseconds, so a
# chunk of many lines (or file blocks) rather than one.
CHUNK_BYTES = 64 * 1024


async def in_request_thread(parts: Iterable[bytes]) -> AsyncIterator[bytes]:
    """Yield `parts` joined into chunks of about CHUNK_BYTES, each read in the request's thread.

    When the response ends early (the client went away), the rest is not read; Django
    closes the response (and with it the iterator's resources) in that thread afterwards.
    """
    iterator = iter(parts)

    def take() -> bytes:
        chunk, size = [], 0
        for part in iterator:
            chunk.append(part)
            size += len(part)
            if size >= CHUNK_BYTES:
                break
        return b"".join(chunk)

    take_in_thread = sync_to_async(take, thread_sensitive=True)
    while chunk := await take_in_thread():
        yield chunk


class AsyncStreamingMiddleware:
    """Under ASGI, serve a streaming response's sync iterator through `in_request_thread`.

    Listed first in MIDDLEWARE, so it sees every response the others produce: WhiteNoise's
    static files as well as the views' streams. Under WSGI responses pass untouched.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if isinstance(request, ASGIRequest) and response.streaming and not response.is_async:
            # `streaming_content` of a sync response is its iterator mapped to bytes.
            response.streaming_content = in_request_thread(response.streaming_content)
        return response
