"""Rollout pages: the list, the start form, the live dashboard and a person's decisions (thin)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from canary import selectors, services
from canary.forms import RolloutActionForm, RolloutStartForm
from canary.models import RolloutStatus
from kiln.errors import KilnError, NotFound
from kiln.identity.permissions import actor_from_request, can_manage_rollout, can_promote_rollout


@login_required
def rollout_list(request):
    """Every rollout the viewer may see, newest first."""
    actor = actor_from_request(request)
    status = request.GET.get("status") or None
    if status not in RolloutStatus.values:
        status = None
    rollouts = selectors.rollout_list(viewer=actor, status=status)[:200]
    return render(
        request,
        "canary/rollouts/list.html",
        {"rollouts": rollouts, "status": status or "", "statuses": RolloutStatus.choices},
    )


@login_required
@require_http_methods(["GET", "POST"])
def rollout_new(request):
    """Start a rollout of a service the viewer's team owns."""
    actor = actor_from_request(request)
    form = RolloutStartForm(request.POST or None, services=selectors.service_list(viewer=actor))
    if request.method == "POST" and form.is_valid():
        try:
            rollout = services.rollout_create(actor=actor, **form.rollout_kwargs())
        except KilnError as exc:
            _form_errors(form, exc)
        else:
            messages.success(request, f"Rollout of {rollout.canary_version} started.")
            return redirect("canary:rollout-detail", rollout_id=rollout.pk)
    return render(
        request, "canary/rollouts/new.html", {"form": form}, status=400 if form.errors else 200
    )


def _form_errors(form, exc: KilnError) -> None:
    fields = exc.extra.get("fields") or {}
    for field, message in fields.items():
        name = field.removeprefix("config.")
        if field == "config" and any(k.startswith("config.") for k in fields):
            continue  # said once, on the setting itself
        form.add_error(name if name in form.fields else None, message)
    if not fields:
        form.add_error(None, exc.message)


def _visible(request, rollout_id):
    try:
        return selectors.rollout_get(viewer=actor_from_request(request), rollout_id=rollout_id)
    except NotFound as exc:
        raise Http404("no such rollout") from exc


@login_required
def rollout_detail(request, rollout_id):
    """One rollout: facts, the analysis in words, the live charts, the decisions, the controls."""
    rollout = _visible(request, rollout_id)
    actor = actor_from_request(request)
    return render(
        request,
        "canary/rollouts/detail.html",
        {
            "rollout": rollout,
            "decisions": rollout.decisions.order_by("created_at", "id"),
            "analysis": selectors.rollout_analysis_view(rollout),
            "can_manage": can_manage_rollout(actor, rollout.service.team.slug),
            "can_promote": can_promote_rollout(actor),
            "action_form": RolloutActionForm(),
        },
    )


# A person's decisions on a rollout (RolloutActionForm.ACTIONS), by name.
STEERING = {
    "promote": services.rollout_promote,
    "abort": services.rollout_abort,
    "retry": services.rollout_retry,
    "extend": services.rollout_extend,
}


@login_required
@require_POST
def rollout_action(request, rollout_id):
    """Promote anyway, abort, retry or extend, with a reason; the services check role and state."""
    rollout = _visible(request, rollout_id)
    actor = actor_from_request(request)
    form = RolloutActionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Say why: a decision on a rollout needs a reason.")
        return redirect("canary:rollout-detail", rollout_id=rollout.pk)
    d = form.cleaned_data
    steer = STEERING[d["action"]]
    extra = {"ticks": d.get("ticks")} if d["action"] == "extend" else {}
    try:
        steer(actor=actor, rollout=rollout, reason=d["reason"], **extra)
    except KilnError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Rollout {d['action']}: done.")
    return redirect("canary:rollout-detail", rollout_id=rollout.pk)
