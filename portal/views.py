"""Portal pages: request form with a live estimate, my environments, detail with live progress,
approval queue and showback. Thin: services and selectors do the work."""

from __future__ import annotations

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from kiln.errors import KilnError, NotFound
from kiln.identity.permissions import (
    ENGINEER,
    actor_from_request,
    can_act_on_environment,
    can_approve,
    has_role,
)
from portal import selectors, services
from portal.forms import EnvironmentRequestForm, ExtendForm, ReasonForm
from portal.lifecycle import Status, badge
from portal.services import cost
from portal.validation import field_errors

ACTIVE = {Status.APPROVED, Status.PROVISIONING, Status.EXPIRING, Status.TEARING_DOWN}


def _env_or_404(request: HttpRequest, public_id: str):
    try:
        return selectors.environment_get(viewer=actor_from_request(request), public_id=public_id)
    except NotFound as exc:
        raise Http404("no such environment") from exc


@login_required
def environment_list(request: HttpRequest) -> HttpResponse:
    """My environments: the visible ones, filterable by status, class and team."""
    actor = actor_from_request(request)
    filters = selectors.EnvironmentFilter(
        team=request.GET.get("team", ""),
        status=request.GET.get("status", ""),
        env_class=request.GET.get("env_class", ""),
        q=request.GET.get("q", ""),
        requested_by=actor.username if request.GET.get("mine") else "",
    )
    page = Paginator(selectors.environment_list(viewer=actor, filters=filters), 25).get_page(
        request.GET.get("page")
    )
    rows = [{"env": e, "badge": badge(e.status)} for e in page]
    return render(
        request,
        "portal/list.html",
        {
            "rows": rows,
            "page": page,
            "filters": filters,
            "statuses": [s.value for s in Status],
            "can_request": has_role(actor, ENGINEER),
            "querystring": request.GET.urlencode(),
        },
    )


def _estimate_from(data) -> dict | None:
    """The estimate for the form's current values; None while they are not a request Kiln
    would take (the same field rules as the API, so no size reaches the price arithmetic)."""
    try:
        args = {
            "env_class": data.get("env_class") or "dev",
            "ttl_hours": max(int(data.get("ttl_hours") or 1), 1),
            "cpu": max(int(data.get("cpu") or 1), 1),
            "memory_gib": max(int(data.get("memory_gib") or 1), 1),
            "gpu": max(int(data.get("gpu") or 0), 0),
        }
    except (TypeError, ValueError):
        return None
    if field_errors({**args, "name": "x", "team": "x", "workload_class": "standard"}):
        return None
    return cost.estimate(
        **args,
        spot=bool(data.get("spot_node_pool")),
        tenant_control_plane=bool(data.get("tenant_control_plane")),
        database=bool(data.get("database")),
    )


@login_required
def environment_request(request: HttpRequest) -> HttpResponse:
    """The request form; on success, the new environment's page."""
    actor = actor_from_request(request)
    teams = list(selectors.teams_for(actor).values_list("slug", flat=True))
    if not has_role(actor, ENGINEER) or not teams:
        raise PermissionDenied("Only engineers of a team can request environments.")
    form = EnvironmentRequestForm(request.POST or None, teams=teams)
    if request.method == "POST" and form.is_valid():
        try:
            env, _ = services.environment_request_submit(actor=actor, data=form.cleaned_data)
        except KilnError as exc:
            for field, errors in (exc.extra.get("fields") or {}).items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
            if not exc.extra.get("fields"):
                form.add_error(None, exc.message)
        else:
            messages.success(
                request, f"Requested {env.namespace}: {env.status.replace('_', ' ').lower()}."
            )
            return redirect("portal:environment-detail", public_id=env.public_id)
    source = request.POST if request.method == "POST" else {f: form[f].value() for f in form.fields}
    return render(
        request, "portal/request.html", {"form": form, "estimate": _estimate_from(source)}
    )


@login_required
def environment_estimate(request: HttpRequest) -> HttpResponse:
    """htmx partial: the cost estimate for the form's current values."""
    return render(request, "portal/_estimate.html", {"estimate": _estimate_from(request.GET)})


def _detail_context(request: HttpRequest, env) -> dict:
    actor = actor_from_request(request)
    return {
        "env": env,
        "badge": badge(env.status),
        "active": Status(env.status) in ACTIVE,
        "steps": selectors.environment_steps(env),
        "resources": selectors.environment_resources(env),
        "timeline": selectors.environment_timeline(env),
        "can_act": can_act_on_environment(actor, env.team.slug),
        "can_decide": can_approve(actor, env.request.requested_by.get_username())
        and env.status == Status.PENDING_APPROVAL,
    }


@login_required
def environment_detail(request: HttpRequest, public_id: str) -> HttpResponse:
    """Status, resources, manifests, policy decisions, approvals and the audit timeline."""
    env = _env_or_404(request, public_id)
    context = _detail_context(request, env)
    context.update(
        {
            "manifests_yaml": yaml.safe_dump_all(env.manifests, sort_keys=False)
            if env.manifests
            else "",
            "decisions": list(env.policy_decisions.all()),
            "approvals": list(env.decisions.all()),
            "extend_form": ExtendForm(),
        }
    )
    return render(request, "portal/detail.html", context)


@login_required
def environment_progress(request: HttpRequest, public_id: str) -> HttpResponse:
    """htmx partial polled while the environment is changing; asks for a full refresh when it settles."""
    env = _env_or_404(request, public_id)
    context = _detail_context(request, env)
    response = render(request, "portal/_progress.html", context)
    if not context["active"] and request.GET.get("was") in {s.value for s in ACTIVE}:
        response["HX-Refresh"] = "true"
    return response


@login_required
@require_POST
def environment_extend(request: HttpRequest, public_id: str) -> HttpResponse:
    """Extend the TTL."""
    env = _env_or_404(request, public_id)
    form = ExtendForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give the extension as a whole number of hours.")
    else:
        try:
            services.environment_extend(
                actor=actor_from_request(request), environment=env, hours=form.cleaned_data["hours"]
            )
            messages.success(request, f"Extended by {form.cleaned_data['hours']} h.")
        except KilnError as exc:
            fields = exc.extra.get("fields") or {}
            messages.error(request, "; ".join(sum(fields.values(), [])) or exc.message)
    return redirect("portal:environment-detail", public_id=public_id)


@login_required
@require_POST
def environment_teardown(request: HttpRequest, public_id: str) -> HttpResponse:
    """Request teardown."""
    env = _env_or_404(request, public_id)
    form = ReasonForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        services.environment_teardown_request(
            actor=actor_from_request(request),
            environment=env,
            reason=reason or "teardown requested in the portal",
        )
        messages.success(request, "Teardown requested.")
    except KilnError as exc:
        messages.error(request, exc.message)
    return redirect("portal:environment-detail", public_id=public_id)


@login_required
def approval_queue(request: HttpRequest) -> HttpResponse:
    """Requests waiting for approval, with approve and reject (reason required) buttons."""
    actor = actor_from_request(request)
    if not can_approve(actor):
        raise PermissionDenied("Only approvers see the approval queue.")
    rows = []
    for env in selectors.approval_queue(viewer=actor):
        approvals = [d for d in env.decisions.all() if d.decision == "approve"]
        rows.append(
            {
                "env": env,
                "approvals": approvals,
                "needed": services.approvals.approvals_needed(environment=env),
                "own": env.request.requested_by.get_username() == actor.username,
                "decided": any(d.approver_name == actor.username for d in env.decisions.all()),
            }
        )
    return render(request, "portal/approvals.html", {"rows": rows})


@login_required
@require_POST
def environment_decide(request: HttpRequest, public_id: str) -> HttpResponse:
    """Approve or reject from the queue or the detail page."""
    env = _env_or_404(request, public_id)
    actor = actor_from_request(request)
    form = ReasonForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        if request.POST.get("decision") == "reject":
            services.environment_reject(actor=actor, environment=env, reason=reason)
            messages.success(request, f"Rejected {env.namespace}.")
        else:
            services.environment_approve(actor=actor, environment=env, reason=reason)
            messages.success(request, f"Approved {env.namespace}.")
    except KilnError as exc:
        messages.error(request, exc.message)
    target = request.POST.get("next", "")
    if not target.startswith("/") or not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}
    ):
        target = reverse("portal:approval-queue")
    return redirect(target)


@login_required
def showback(request: HttpRequest) -> HttpResponse:
    """Spend per team, by environment and class, from hourly prices and lifetimes."""
    actor = actor_from_request(request)
    rows = selectors.team_showback(viewer=actor, team=request.GET.get("team") or None)
    return render(request, "portal/showback.html", {"rows": rows})
