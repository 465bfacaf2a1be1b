"""ASGI entry point: Django for HTTP, Channels for websockets (session or bearer-token auth).

Public read-only GETs whose view offers a `fast_read` are answered beside Django's
middleware (kiln/fast_reads.py); everything else goes through Django's own ASGI handler, its
middleware and view.

Each web process imports every view, then freezes what it holds (kiln/heap.py), so no full
garbage collection walks the startup objects while requests wait.

Websocket routes come from the modules named in `settings.KILN_WEBSOCKET_ROUTES`
(each has `websocket_urlpatterns`), so the project package imports no app; any other path is
refused with a 404 (kiln/websocket_not_found.py).
"""

import os
from importlib import import_module

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kiln.settings")

from django.core.asgi import get_asgi_application  # noqa: E402 - after the settings are named

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - after Django is set up
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from kiln import heap  # noqa: E402
from kiln.fast_reads import FastReads  # noqa: E402
from kiln.websocket import SameOriginValidator  # noqa: E402
from kiln.websocket_not_found import NOT_FOUND_ROUTE  # noqa: E402

websocket_urlpatterns = [
    route
    for name in settings.KILN_WEBSOCKET_ROUTES
    for route in import_module(name).websocket_urlpatterns
] + [NOT_FOUND_ROUTE]  # last: a path no app serves is refused with a 404, not a traceback

application = ProtocolTypeRouter(
    {
        "http": FastReads(django_asgi_app) if settings.KILN_FAST_READS else django_asgi_app,
        # Scheme, host and port must be the socket's own (or a CSRF_TRUSTED_ORIGINS entry).
        "websocket": SameOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

if settings.KILN_GC_FREEZE:
    heap.freeze_after(heap.import_views)
heap.time_collections(refreeze=heap.WARM_UP_FULL_COLLECTIONS if settings.KILN_GC_FREEZE else 0)
