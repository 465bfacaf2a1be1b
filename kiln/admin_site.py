"""The admin site and a ModelAdmin base whose permissions come from kiln.identity.permissions."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin
from django.http import HttpRequest

from kiln.identity import permissions
from kiln.identity.permissions import Actor


def admin_actor(request: HttpRequest) -> Actor:
    """The Actor behind an admin request (session user; roles from Django groups)."""
    return permissions.actor_from_request(request)


class KilnAdminSite(admin.AdminSite):
    """Kiln's admin: staff accounts that are platform admins or approvers may enter."""

    site_header = "Kiln administration"
    site_title = "Kiln admin"
    index_title = "Teams, approvals and platform data"

    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        if not (user.is_active and user.is_authenticated):
            return False
        return permissions.can_use_admin(admin_actor(request), is_staff=user.is_staff)


Predicate = Callable[[Actor], bool]


class KilnModelAdmin(admin.ModelAdmin):
    """A ModelAdmin whose view/add/change/delete rights are predicates over the Actor.

    Writes made through the admin must go through services (override save_model /
    delete_model) so they are audited like any other change.
    """

    view_predicate: Predicate = staticmethod(permissions.can_administer)
    add_predicate: Predicate | None = None
    change_predicate: Predicate | None = None
    delete_predicate: Predicate | None = None

    def _allowed(self, request: HttpRequest, predicate: Predicate | None) -> bool:
        return predicate is not None and predicate(admin_actor(request))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._allowed(request, self.view_predicate)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._allowed(request, self.view_predicate)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._allowed(request, self.add_predicate)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._allowed(request, self.change_predicate)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._allowed(request, self.delete_predicate)


class ReadOnlyInline(admin.TabularInline):
    """A read-only inline list: nothing is added, changed or deleted through it; who may see it
    is a predicate over the Actor."""

    extra = 0
    can_delete = False
    view_predicate: Predicate = staticmethod(permissions.can_administer)

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return self.view_predicate(admin_actor(request))
