"""Admin for teams and memberships; writes go through the audited identity services."""

from __future__ import annotations

from django.contrib import admin

from kiln.admin_site import KilnModelAdmin, admin_actor
from kiln.identity import permissions, services
from portal.models import Membership, Team


def _can_view_teams(actor: permissions.Actor) -> bool:
    return permissions.has_role(actor, permissions.APPROVER)


class MembershipInline(admin.TabularInline):
    """Read-only list of a team's members on the team page."""

    model = Membership
    fields = ("user", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        return _can_view_teams(admin_actor(request))


@admin.register(Team)
class TeamAdmin(KilnModelAdmin):
    """Teams: platform admins create them; approvers and admins browse them."""

    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    fields = ("slug", "name")
    inlines = [MembershipInline]
    view_predicate = staticmethod(_can_view_teams)
    add_predicate = staticmethod(permissions.can_manage_teams)

    def save_model(self, request, obj: Team, form, change: bool) -> None:
        team = services.team_create(actor=admin_actor(request), slug=obj.slug, name=obj.name)
        obj.pk, obj.created_at = team.pk, team.created_at


@admin.register(Membership)
class MembershipAdmin(KilnModelAdmin):
    """Who belongs to which team: platform admins add and remove members."""

    list_display = ("user", "team", "created_at")
    list_filter = ("team",)
    search_fields = ("user__username", "team__slug")
    fields = ("user", "team")
    view_predicate = staticmethod(_can_view_teams)
    add_predicate = staticmethod(permissions.can_manage_teams)
    delete_predicate = staticmethod(permissions.can_manage_teams)

    def save_model(self, request, obj: Membership, form, change: bool) -> None:
        membership = services.membership_add(
            actor=admin_actor(request), team=obj.team, username=obj.user.get_username()
        )
        obj.pk, obj.created_at = membership.pk, membership.created_at

    def delete_model(self, request, obj: Membership) -> None:
        services.membership_remove(actor=admin_actor(request), membership=obj)

    def delete_queryset(self, request, queryset) -> None:
        for membership in queryset.select_related("user", "team"):
            services.membership_remove(actor=admin_actor(request), membership=membership)
