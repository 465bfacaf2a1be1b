"""Admin for teams, memberships, people and groups; every change made here is audited."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db import transaction

import audit
from kiln.admin_site import KilnModelAdmin, ReadOnlyInline, admin_actor, related_text
from kiln.identity import permissions, services, visibility
from kiln.identity.models import Membership, Team


def _can_view_teams(actor: permissions.Actor) -> bool:
    return permissions.has_role(actor, permissions.APPROVER)


class MembershipInline(ReadOnlyInline):
    """Read-only list of a team's members on the team page."""

    model = Membership
    fields = ("member", "source", "created_at")
    readonly_fields = fields
    view_predicate = staticmethod(_can_view_teams)
    member = related_text("user", "user", "user__username")


@admin.register(Team)
class TeamAdmin(KilnModelAdmin):
    """Teams: platform admins create them; approvers and admins browse them."""

    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    fields = ("slug", "name")
    inlines = [MembershipInline]
    view_predicate = staticmethod(_can_view_teams)
    add_predicate = staticmethod(permissions.can_manage_teams)

    def get_queryset(self, request):
        """The teams the viewer may see: its own, or every team for a platform admin."""
        return visibility.restrict(
            super().get_queryset(request), admin_actor(request), visibility.TEAMS, team_field="slug"
        )

    def save_model(self, request, obj: Team, form, change: bool) -> None:
        team = services.team_create(actor=admin_actor(request), slug=obj.slug, name=obj.name)
        obj.pk, obj.created_at = team.pk, team.created_at


class MembershipAddForm(forms.ModelForm):
    """Grant a team: a membership the user holds from a token claim becomes an admin grant."""

    class Meta:
        model = Membership
        fields = ("user", "team")

    def clean(self) -> dict:
        cleaned = super().clean()
        user, team = cleaned.get("user"), cleaned.get("team")
        existing = (
            Membership.objects.filter(user=user, team=team).first() if user and team else None
        )
        if existing is not None and existing.source == Membership.ADMIN:
            raise forms.ValidationError(f"{user} is already a member of {team.slug}.")
        if existing is not None:
            self.instance = existing  # the grant turns this claim row into an admin one
        return cleaned


@admin.register(Membership)
class MembershipAdmin(KilnModelAdmin):
    """Who belongs to which team, and whether a token claim or a platform admin says so.

    Members added here are admin grants; claim memberships follow each token and
    come back at the next authentication if removed here while the claim still names them.
    """

    list_display = ("user", "team", "source", "created_at")
    # Only the teams the viewer may see are offered: the rows' own, after get_queryset.
    list_filter = (("team", admin.RelatedOnlyFieldListFilter), "source")
    search_fields = ("user__username", "team__slug")
    fields = ("user", "team")
    form = MembershipAddForm
    view_predicate = staticmethod(_can_view_teams)
    add_predicate = staticmethod(permissions.can_manage_teams)
    delete_predicate = staticmethod(permissions.can_manage_teams)

    def get_queryset(self, request):
        """The memberships of the teams the viewer may see (visibility.TEAMS)."""
        return visibility.restrict(
            super().get_queryset(request).select_related("user", "team"),
            admin_actor(request),
            visibility.TEAMS,
            team_field="team__slug",
        )

    member = related_text("user", "user", "user__username")

    def get_fields(self, request, obj=None):
        """A membership is never changed, only read: its user as text (see related_text)."""
        return self.fields if obj is None else ("member", "team", "source", "created_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.get_fields(request, obj)

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


def audit_target(obj) -> str:
    """The audit target of a model instance, computed before it is deleted (and loses its pk)."""
    return f"{obj._meta.app_label}.{obj._meta.model_name}:{obj.pk}"


class AuditedAdminMixin:
    """Record every add, change and delete made through this admin with audit.record().

    The admin's change and delete views run in one transaction, so the audit row
    commits or rolls back with the change; bulk deletes are wrapped here.
    """

    audit_prefix = "kiln.object"

    def audit_data(self, obj) -> dict:
        return {}

    def _changed_fields(self, message) -> list[str]:
        if not isinstance(message, list):
            return []
        return sorted({f for m in message for f in m.get("changed", {}).get("fields", [])})

    def log_addition(self, request, obj, message):
        data = {**self.audit_data(obj), "via": "admin"}
        audit.record(admin_actor(request), f"{self.audit_prefix}.created", obj, data)
        return super().log_addition(request, obj, message)

    def log_change(self, request, obj, message):
        data = {**self.audit_data(obj), "fields": self._changed_fields(message), "via": "admin"}
        audit.record(admin_actor(request), f"{self.audit_prefix}.changed", obj, data)
        return super().log_change(request, obj, message)

    def delete_model(self, request, obj) -> None:
        with transaction.atomic():
            target, data = audit_target(obj), {**self.audit_data(obj), "via": "admin"}
            super().delete_model(request, obj)
            audit.record(admin_actor(request), f"{self.audit_prefix}.deleted", target, data)

    def delete_queryset(self, request, queryset) -> None:
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)


class PlatformAdminOnlyMixin:
    """Only platform admins see or change these models (asks kiln.identity.permissions)."""

    def _platform_admin(self, request) -> bool:
        return permissions.can_administer(admin_actor(request))

    def has_module_permission(self, request) -> bool:
        return self._platform_admin(request)

    def has_view_permission(self, request, obj=None) -> bool:
        return self._platform_admin(request)

    def has_add_permission(self, request) -> bool:
        return self._platform_admin(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._platform_admin(request)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._platform_admin(request)


User = get_user_model()
for _model in (User, Group):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)


@admin.register(User)
class KilnUserAdmin(AuditedAdminMixin, PlatformAdminOnlyMixin, UserAdmin):
    """People: their groups are their roles, so every change here is audited."""

    audit_prefix = "kiln.user"

    def audit_data(self, obj) -> dict:
        return {
            "username": obj.get_username(),
            "groups": sorted(obj.groups.values_list("name", flat=True)) if obj.pk else [],
            "is_active": obj.is_active,
            "is_staff": obj.is_staff,
            "is_superuser": obj.is_superuser,
        }


@admin.register(Group)
class KilnGroupAdmin(AuditedAdminMixin, PlatformAdminOnlyMixin, GroupAdmin):
    """Groups: the ones named after a role grant it."""

    audit_prefix = "kiln.group"

    def audit_data(self, obj) -> dict:
        return {"name": obj.name}
