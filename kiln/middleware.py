"""Process-wide HTTP middleware: the Content-Security-Policy header, `Cache-Control: no-store` on
authenticated answers, and request metrics."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from kiln import heap
from kiln.observability import HTTP_LATENCY, HTTP_REQUESTS


class ContentSecurityPolicyMiddleware:
    """Add the configured Content-Security-Policy (and Permissions-Policy) to every response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.CONTENT_SECURITY_POLICY and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = settings.CONTENT_SECURITY_POLICY
        response.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
        return response


def _authenticated(request: HttpRequest) -> bool:
    """True when the request came with credentials: a bearer token (whether or not it was
    accepted), or a session whose user is signed in (a user DRF authenticated from a token
    replaces `request.user` on the Django request too)."""
    if "Authorization" in request.headers:
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)


class NoStoreMiddleware:
    """`Cache-Control: no-store` on every answer to a signed-in user or a bearer token.

    Pages, API answers and downloads (manifest bundles, kubeconfigs, audit exports) of a
    signed-in caller hold what only that caller may see: no browser cache, shared proxy or
    back button keeps a copy. Listed above SessionMiddleware, so reading `request.user` here
    (after the view) adds no `Vary: Cookie`; answers that never reach the session (WhiteNoise's
    static files, `kiln.fast_reads`' public reads) keep their own caching.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if _authenticated(request):
            # Replaces what a view set: `public, max-age` (a tile) or `private, no-cache` (an
            # ETag'd answer) are both weaker than this for a caller's own answer.
            response["Cache-Control"] = "private, no-store"
            if "Expires" in response:
                del response["Expires"]
        return response


class RequestMetricsMiddleware:
    """Count requests and time them, labelled by the matched route pattern (never the raw path)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        HTTP_LATENCY.labels(request.method, route).observe(time.perf_counter() - started)
        HTTP_REQUESTS.labels(request.method, route, str(response.status_code)).inc()
        heap.publish_pauses()
        return response
