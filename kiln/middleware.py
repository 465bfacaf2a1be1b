"""Process-wide HTTP middleware: the Content-Security-Policy header and request metrics."""

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
