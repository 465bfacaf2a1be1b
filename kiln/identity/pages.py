"""The role rule for HTML pages: a signed-in person without a Kiln role sees only the home page.

The API has the same rule as its default DRF permission (`kiln.identity.drf.HasKilnRole`);
this middleware applies it to the apps' pages, asking `kiln.identity.permissions`.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from kiln.identity import permissions

# Page namespaces the rule covers (the admin asks can_use_admin, the API asks HasKilnRole).
APP_PAGE_NAMESPACES = frozenset({"portal", "scheduler", "canary", "chaos", "audit"})
# Called by machines, not by people: kube-scheduler (protected by the extender token) and
# tenant API servers' audit webhooks (by each environment's sink token).
MACHINE_ROUTES = frozenset(
    {"scheduler:extender-filter", "scheduler:extender-prioritize", "portal:tenant-audit-sink"}
)


class RoleRequiredPagesMiddleware:
    """403 on every app page for an authenticated person who holds no Kiln role."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs) -> None:
        match = request.resolver_match
        if match is None or match.namespace not in APP_PAGE_NAMESPACES:
            return None
        if match.view_name in MACHINE_ROUTES:
            return None
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None  # the page's login_required sends them to sign in
        if not permissions.has_any_role(permissions.actor_from_request(request)):
            raise PermissionDenied("You hold no Kiln role; ask a platform admin for one.")
        return None
