"""Project-level views: home, health, readiness, metrics, API root and error pages."""

from __future__ import annotations

import sys

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.urls import URLPattern, URLResolver, get_resolver
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularSwaggerSplitView
from prometheus_client import CONTENT_TYPE_LATEST
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from kiln import dashboard, health, observability, search
from kiln.attention.selectors import attention_list
from kiln.dbpool import pool_exhausted
from kiln.errors import KilnError, error_body
from kiln.identity.permissions import actor_from_request, can_use_admin


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The dashboard: what each app shows this person (kiln.dashboard), who you are, the API."""
    actor = actor_from_request(request)
    return render(
        request,
        "kiln/home.html",
        {
            "actor": actor,
            "roles": sorted(actor.roles),
            "teams": sorted(actor.teams),
            "show_admin": can_use_admin(actor, is_staff=request.user.is_staff),
            "attention": attention_list(viewer=actor),
            "panels": [
                loader.render_to_string(p.template, p.context, request=request)
                for p in dashboard.panels(actor)
            ],
        },
    )


@login_required
@require_GET
def search_page(request: HttpRequest) -> HttpResponse:
    """Results of the header's search, by kind, among what the viewer may see (kiln.search)."""
    raw = request.GET.get("q", "")
    try:
        hits = search.search(actor_from_request(request), raw)
    except KilnError as exc:
        context = {"q": raw.strip(), "error": exc.message, "groups": []}
        return render(request, "kiln/search.html", context, status=exc.http_status)
    groups: dict[str, list[search.Hit]] = {}
    for hit in hits:
        groups.setdefault(hit.kind, []).append(hit)
    query = search.clean_query(raw)
    return render(
        request,
        "kiln/search.html",
        {
            "q": query,
            "groups": list(groups.items()),
            "count": len(hits),
            "audit_links": search.audit_links(actor_from_request(request), query),
        },
    )


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
    """Prometheus text exposition of the web's metrics (every web process's, when several); in
    standalone the one process is every kind, so it exports every kind's figures."""
    kinds = observability.KINDS if settings.STANDALONE else ("web",)
    return HttpResponse(observability.exposition(*kinds), content_type=CONTENT_TYPE_LATEST)


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


class ApiDocsView(SpectacularSwaggerSplitView):
    """Swagger UI from the vendored sidecar assets; no inline script or style, so the CSP holds."""

    template_name = "kiln/swagger_ui.html"


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


def _error_page(request: HttpRequest | None, status: int, title: str, message: str) -> HttpResponse:
    context = {"status": status, "title": title, "message": message}
    if request is None:  # a 500: render without context processors, which may be what failed
        return HttpResponse(loader.render_to_string("kiln/error.html", context), status=status)
    return render(request, "kiln/error.html", context, status=status)


def not_found(request: HttpRequest, exception=None) -> HttpResponse:
    """404: JSON for API clients, a page for people."""
    if _wants_json(request):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return _error_page(
        request, 404, "Page not found", "There is nothing at this address. It may have moved."
    )


def permission_denied(request: HttpRequest, exception=None) -> HttpResponse:
    """403: JSON for API clients, a page for people."""
    if _wants_json(request):
        return JsonResponse(error_body("forbidden", "You may not do this."), status=403)
    return _error_page(
        request, 403, "Not allowed", "Your roles do not give you access to this page."
    )


def bad_request(request: HttpRequest, exception=None) -> HttpResponse:
    """400 raised outside a view's own handling (for example a bad Host header)."""
    if _wants_json(request):
        return JsonResponse(error_body("invalid", "Bad request."), status=400)
    return _error_page(request, 400, "Bad request", "The request could not be understood.")


def server_error(request: HttpRequest) -> HttpResponse:
    """500: logged by Django; the response says so and nothing more.

    Django calls this while handling the exception, so `sys.exc_info()` names it: the database
    pool's bounded wait running out is a 503 with its reason and a Retry-After, not a 500.
    """
    if pool_exhausted(sys.exc_info()[1]):
        response = _pool_exhausted(request)
        response["Retry-After"] = "1"
        return response
    if _wants_json(request):
        return JsonResponse(
            error_body("server_error", "Internal error; it has been logged."), status=500
        )
    return _error_page(
        None, 500, "Something went wrong", "The error has been logged. Please try again."
    )


def _pool_exhausted(request: HttpRequest) -> HttpResponse:
    reason = (
        "Every database connection of this process stayed busy for "
        f"{getattr(settings, 'KILN_DB_POOL_TIMEOUT', 0):g} s (KILN_DB_POOL_TIMEOUT); try again."
    )
    if _wants_json(request):
        return JsonResponse(
            error_body("database_busy", "The database is busy.", {"reason": reason}), status=503
        )
    return _error_page(None, 503, "Busy", reason)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: Kiln's own 403 page (Django's default carries inline styles)."""
    if _wants_json(request):
        return JsonResponse(
            error_body("csrf_failed", "CSRF verification failed.", {"reason": reason}), status=403
        )
    return _error_page(
        request,
        403,
        "Form expired",
        "The form could not be verified. Reload the page and submit it again.",
    )
