"""The admin site and a ModelAdmin base whose permissions come from kiln.identity.permissions."""

from __future__ import annotations

from collections.abc import Callable
from functools import update_wrapper

from django.contrib import admin
from django.contrib.admin import helpers
from django.core.exceptions import BadRequest, ValidationError
from django.http import HttpRequest

from kiln.identity import permissions
from kiln.identity.permissions import Actor
from kiln.params import column_range


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

    def admin_view(self, view, cacheable: bool = False):
        """Every admin view, with the selected rows of a changelist action checked first:
        Django filters `pk__in` with whatever was posted, and a value the primary key cannot
        hold ("abc", 2**64) raised there, a 500. Here it is a 400."""
        model_admin = getattr(view, "__self__", None)
        model = getattr(model_admin, "model", None)

        def checked(request: HttpRequest, *args, **kwargs):
            if model is not None and request.method == "POST":
                selected_pks_check(model, request.POST.getlist(helpers.ACTION_CHECKBOX_NAME))
            return view(request, *args, **kwargs)

        checked = update_wrapper(checked, view)
        return super().admin_view(checked, cacheable)


def selected_pks_check(model, values: list[str]) -> None:
    """BadRequest unless every value is a primary key `model`'s column can hold."""
    pk = model._meta.pk
    bounds = column_range(pk.get_internal_type())
    for value in values:
        try:
            key = pk.to_python(value)
        except ValidationError as exc:
            raise BadRequest(
                f"{value[:40]!r} is not an id of a {model._meta.verbose_name}"
            ) from exc
        if bounds is not None and not bounds[0] <= key <= bounds[1]:
            raise BadRequest(f"{value[:40]!r} is not an id of a {model._meta.verbose_name}")


Predicate = Callable[[Actor], bool]


def related_text(field: str, description: str, ordering: str):
    """A read-only column or field naming the object `field` points to, as text.

    Django links a read-only foreign key to the object's admin page whatever the viewer may
    open there: a user's page only platform admins may open, a team's page only for the teams
    the viewer sees, where an approver who sees every team's environments may not see every
    team. Following it ended in a 403 or "does not exist".
    """

    @admin.display(description=description, ordering=ordering)
    def show(self, obj) -> str:
        related = getattr(obj, field)
        return str(related) if related is not None else "-"

    return show


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
