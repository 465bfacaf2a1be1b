"""Project-level views: home, health, readiness, metrics, API root and error pages."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import URLPattern, URLResolver, get_resolver
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from kiln import health
from kiln.errors import error_body
from kiln.identity.permissions import actor_from_request


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The landing page: who you are and where to go."""
    return render(request, "kiln/home.html", {"actor": actor_from_request(request)})


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers."""
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database and Redis answer (and every registered check passes)."""
    ok, checks = health.run_checks()
    return JsonResponse(
        {"status": "ready" if ok else "not ready", "checks": checks}, status=200 if ok else 503
    )


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition of this process's metrics."""
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)


class ApiRootView(APIView):
    """Index of the v1 API: every route below /api/v1/."""

    permission_classes = [AllowAny]

    @extend_schema(exclude=True)
    def get(self, request):
        routes: list[str] = []
        for pattern in get_resolver().url_patterns:
            if isinstance(pattern, URLResolver) and str(pattern.pattern) == "api/v1/":
                routes = sorted({"/api/v1/" + r for r in _routes(pattern) if r})
        return Response(
            {"version": "v1", "schema": "/api/schema/", "docs": "/api/docs/", "routes": routes}
        )


def _routes(resolver: URLResolver, prefix: str = "") -> list[str]:
    found: list[str] = []
    for p in resolver.url_patterns:
        if isinstance(p, URLResolver):
            found += _routes(p, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            found.append(prefix + str(p.pattern))
    return found


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(
        ("/api/", "/scheduler/")
    ) or "application/json" in request.headers.get("Accept", "")


def not_found(request: HttpRequest, exception=None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return render(request, "kiln/error.html", {"status": 404, "title": "Not found"}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(
            error_body("server_error", "Internal error; it has been logged."), status=500
        )
    return render(
        request, "kiln/error.html", {"status": 500, "title": "Something went wrong"}, status=500
    )
