"""Django admin for environments: approvers approve and reject (reason required) through services."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.template.response import TemplateResponse

from kiln.admin_site import KilnModelAdmin, ReadOnlyInline, admin_actor, related_text
from kiln.errors import KilnError
from kiln.identity import permissions, visibility
from portal import services
from portal.lifecycle import LABELS, Status, label
from portal.models import (
    ApprovalDecision,
    Environment,
    Notification,
    PolicyDecision,
    ProvisioningStep,
    TeamWebhook,
)
from portal.services.notices import team_webhook_delete, team_webhook_set, webhook_url_refusal
from portal.services.plan import environment_plan


def _can_view(actor: permissions.Actor) -> bool:
    return permissions.has_role(actor, permissions.APPROVER)


class ApprovalDecisionInline(ReadOnlyInline):
    model = ApprovalDecision
    fields = ("approver_name", "decision", "reason", "created_at")
    readonly_fields = fields
    view_predicate = staticmethod(_can_view)


class PolicyDecisionInline(ApprovalDecisionInline):
    model = PolicyDecision
    fields = ("stage", "policy", "target", "outcome", "message", "file_sha256")
    readonly_fields = fields

    @admin.display(description="policy file SHA-256")
    def file_sha256(self, obj: PolicyDecision) -> str:
        """The first 12 hex digits, as the portal's detail page shows them (the full hash is in
        the API and the audit event)."""
        return obj.policy_sha256[:12]


class StepInline(ApprovalDecisionInline):
    model = ProvisioningStep
    fields = ("name", "status", "attempts", "detail", "started_at", "finished_at")
    readonly_fields = fields


class RejectForm(forms.Form):
    """The reason every rejection needs."""

    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=2000)


class StatusFilter(admin.SimpleListFilter):
    """The status filter in the words the portal uses ("Waiting for approval", not the code)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [(status.value, LABELS[status]) for status in Status]  # as the portal's list

    def queryset(self, request, queryset):
        return queryset.filter(status=self.value()) if self.value() else queryset


@admin.register(Environment)
class EnvironmentAdmin(KilnModelAdmin):
    """Environments, read-only; approve and reject are actions that call the approval services."""

    list_display = (
        "namespace", "team", "env_class", "status_words",  # what it is
        "requested_by", "created_at", "expires_at",  # who asked, when, until when
    )  # fmt: skip
    # Only the teams whose rows the viewer may see are offered (get_queryset's own).
    list_filter = (StatusFilter, "env_class", ("team", admin.RelatedOnlyFieldListFilter))
    search_fields = ("namespace", "public_id", "request__requested_by__username")

    @admin.display(description="status", ordering="status")
    def status_words(self, obj: Environment) -> str:
        return label(obj.status, obj.status_reason)

    readonly_fields = (
        "public_id",
        "namespace",
        "team_slug",
        "env_class",
        "status_words",
        "status_reason",
        "policy_version",
        "expires_at",
        "datastore_pool",
        "hourly_cost",
        "asleep_hourly_cost",
        "quarantined_by",
        "created_at",
        "ready_at",
        "deleted_at",
        "plan",
    )
    fields = readonly_fields
    inlines = [ApprovalDecisionInline, PolicyDecisionInline, StepInline]
    actions = ["approve_selected", "reject_selected"]
    view_predicate = staticmethod(_can_view)

    def get_queryset(self, request):
        # Who sees which team's environments: the one rule (approvers: their teams).
        qs = super().get_queryset(request).select_related("team", "request__requested_by")
        return visibility.restrict(
            qs, admin_actor(request), visibility.ENVIRONMENTS, team_field="team__slug"
        )

    @admin.display(description="plan")
    def plan(self, obj: Environment) -> str:
        """What approving creates: manifests as committed, diff, policy verdicts, cost."""
        return render_to_string("portal/_plan.html", {"plan": environment_plan(environment=obj)})

    team_slug = related_text("team", "team", "team__slug")
    quarantined_by = related_text(
        "quarantine_owner", "quarantine owner", "quarantine_owner__username"
    )

    @admin.display(description="requested by")
    def requested_by(self, obj: Environment) -> str:
        return obj.request.requested_by.get_username()

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def get_actions(self, request):
        # Actions work on view-only admins too: they call services, which check the approver rules.
        actions = super().get_actions(request)
        if not permissions.can_approve(admin_actor(request)):
            actions.pop("approve_selected", None)
            actions.pop("reject_selected", None)
        return actions

    def _each(self, request: HttpRequest, queryset, act) -> int:
        """`act(env)` for each selected environment; a refusal is said for that one and the
        others go on. Returns how many were done."""
        done = 0
        for env in queryset:
            try:
                act(env)
                done += 1
            except KilnError as exc:
                self.message_user(request, _refusal(env, exc), messages.ERROR)
        return done

    @admin.action(description="Approve selected requests")
    def approve_selected(self, request: HttpRequest, queryset) -> None:
        actor = admin_actor(request)
        done = self._each(
            request,
            queryset,
            lambda env: services.environment_approve(
                actor=actor, environment=env, reason="approved in admin"
            ),
        )
        if done:
            self.message_user(request, f"Recorded {_counted(done, 'approval')}.", messages.SUCCESS)

    @admin.action(description="Reject selected requests (reason required)")
    def reject_selected(self, request: HttpRequest, queryset):
        form = RejectForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            actor = admin_actor(request)
            reason = form.cleaned_data["reason"]
            done = self._each(
                request,
                queryset,
                lambda env: services.environment_reject(
                    actor=actor, environment=env, reason=reason
                ),
            )
            if done:
                self.message_user(
                    request, f"Rejected {_counted(done, 'request')}.", messages.SUCCESS
                )
            return None
        return TemplateResponse(
            request,
            "portal/admin/reject.html",
            {
                **self.admin_site.each_context(request),
                "title": "Reject environment requests",
                "form": form,
                "environments": queryset,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                "opts": self.model._meta,
            },
        )


class TeamWebhookForm(forms.ModelForm):
    """The URL refused in the form's words where the service would refuse it."""

    url = forms.URLField(
        max_length=500, assume_scheme="https", help_text="http(s) URL that accepts a JSON POST"
    )

    class Meta:
        model = TeamWebhook
        fields = ("team", "url")

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        refusal = webhook_url_refusal(url)
        if refusal:
            raise forms.ValidationError(refusal)
        return url


@admin.register(TeamWebhook)
class TeamWebhookAdmin(KilnModelAdmin):
    """A team's chat webhook for expiry warnings and idle proposals; writes go through services."""

    form = TeamWebhookForm
    list_display = ("team", "url", "created_at")
    add_predicate = change_predicate = delete_predicate = staticmethod(permissions.can_administer)

    def save_model(self, request, obj, form, change) -> None:
        team_webhook_set(actor=admin_actor(request), team_id=obj.team_id, url=obj.url)

    def delete_model(self, request, obj) -> None:
        team_webhook_delete(actor=admin_actor(request), hook=obj)


@admin.register(Notification)
class NotificationAdmin(KilnModelAdmin):
    """Notifications posted (or still being retried) to team webhooks; read-only."""

    list_display = ("kind", "team", "environment", "status", "attempts", "last_error", "created_at")
    list_filter = ("status", "kind")


# Team budgets (their own module; registered when this one is imported).
from portal import admin_budget  # noqa: E402, F401


def _counted(n: int, noun: str) -> str:
    """`1 approval`, `3 approvals`."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _refusal(env, exc: KilnError) -> str:
    """A refused decision as the admin's message: the reason, naming the request once (the
    admin capitalises a message's first letter, which must not be a namespace's)."""
    if env.namespace in exc.message:
        return exc.message
    return f"{exc.message} ({env.namespace})"
