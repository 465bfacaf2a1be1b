"""Django's ASGI handler with a request's whole middleware chain and view in one thread.

Django's `ASGIHandler` builds its middleware chain for asynchronous use: where a middleware
can only run synchronously (most of Kiln's and Django's own), the chain crosses between the
event loop and the request's thread. With Kiln's list a request crossed four times: to the
thread for the outer middleware, back to the event loop for the innermost (Axes, then
Django's `_get_response_async`), to the thread again for the view, and back. Every crossing
is a task handed between threads through the event loop, whose thread needs the interpreter
lock (held by other requests' threads under load) before the request can go on.

`OneThreadASGIHandler` builds the synchronous chain instead, as Django's WSGI handler does, and
runs it in one call in the request's thread (`thread_sensitive`: the per-request thread
`ThreadSensitiveContext` gives it). Everything else is Django's: reading the body, the request
signals, sending the response and streaming (kiln/streaming.py reads a stream in that same
thread). Kiln has no asynchronous view or middleware that this would put in a thread; one
added later still works (Django runs it through `async_to_sync`), only without the benefit.

Measured with the web alone under eight clients creating environments over HTTP
(`manage.py web_bench`, docs/operations.md#the-webs-request-path): the web's CPU per request,
median of five alternated rounds, 0.893 times that with Django's handler.
"""

from __future__ import annotations

import django
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase


class OneThreadASGIHandler(ASGIHandler):
    """`ASGIHandler` whose middleware chain is synchronous and runs whole in the request's thread."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


def get_asgi_application() -> ASGIHandler:
    """Set Django up (as `django.core.asgi.get_asgi_application` does) and return the handler:
    this one, or Django's own with KILN_WEB_ONE_THREAD=0 (to compare)."""
    django.setup(set_prefix=False)
    return OneThreadASGIHandler() if settings.KILN_WEB_ONE_THREAD else ASGIHandler()
