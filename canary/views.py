"""Rollout pages: the list, the start form, the live dashboard and a person's decisions (thin)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from canary import selectors, services
from canary.charts import chart_tables
from canary.forms import RolloutActionForm, RolloutStartForm
from canary.models import RolloutStatus
from kiln.errors import KilnError, NotFound
from kiln.form_errors import add_service_errors, field_problems
from kiln.identity.permissions import actor_from_request, can_manage_rollout, can_promote_rollout


def rollout_list_context(*, viewer, query) -> dict:
    """The list's rollouts for the viewer and the query's status, 25 a page: the page renders
    them, and the live list (canary/consumers.py) renders them again whenever they change."""
    status = query.get("status") or None
    if status not in RolloutStatus.values:
        status = None
    page = Paginator(selectors.rollout_list(viewer=viewer, status=status), 25).get_page(
        query.get("page")
    )
    return {
        "rollouts": page,
        "page": page,
        "status": status or "",
        "pager_query": f"&status={status}" if status else "",
    }


@login_required
def rollout_list(request):
    """Every rollout the viewer may see, newest first, 25 a page; live."""
    actor = actor_from_request(request)
    return render(
        request,
        "canary/rollouts/list.html",
        {
            **rollout_list_context(viewer=actor, query=request.GET),
            "statuses": RolloutStatus.choices,
            "can_start": selectors.startable_services(viewer=actor).exists(),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def rollout_new(request):
    """Start a rollout of a service the viewer's team owns."""
    actor = actor_from_request(request)
    startable = selectors.startable_services(viewer=actor)
    form = RolloutStartForm(request.POST or None, services=startable)
    if request.method == "POST":
        kwargs = form.rollout_kwargs()
        # The service's checks run on every field Django accepted: all problems in one round.
        _show_errors(
            form,
            services.rollout_field_errors(**{k: v for k, v in kwargs.items() if k != "service"}),
        )
        if form.is_valid():
            try:
                rollout = services.rollout_create(actor=actor, **kwargs)
            except KilnError as exc:
                _show_errors(form, exc.extra.get("fields") or {})
                if not exc.extra.get("fields"):
                    form.add_error(None, exc.message)
            else:
                messages.success(request, f"Rollout of {rollout.canary_version} started.")
                return redirect("canary:rollout-detail", rollout_id=rollout.pk)
    return render(
        request,
        "canary/rollouts/new.html",
        {"form": form, "can_start": startable.exists()},
        status=400 if form.errors else 200,
    )


def _show_errors(form, fields: dict) -> None:
    """The service's field errors on the form (`config.alpha` on α), each problem said once."""
    if any(k.startswith("config.") for k in fields):
        fields = {k: v for k, v in fields.items() if k != "config"}  # said on the setting itself
    add_service_errors(form, fields, field_of=lambda key: key.removeprefix("config."))


def _visible(request, rollout_id):
    try:
        return selectors.rollout_get(viewer=actor_from_request(request), rollout_id=rollout_id)
    except NotFound as exc:
        raise Http404("no such rollout") from exc


@login_required
def rollout_detail(request, rollout_id):
    """One rollout: facts, the analysis in words, the live charts and their tables, the
    decisions, the controls."""
    rollout = _visible(request, rollout_id)
    actor = actor_from_request(request)
    return render(
        request,
        "canary/rollouts/detail.html",
        {
            "rollout": rollout,
            "decisions": rollout.decisions.order_by("created_at", "id"),
            "analysis": selectors.rollout_analysis_view(rollout),
            "charts": chart_tables(selectors.rollout_ticks(rollout), weight=rollout.weight),
            "can_manage": can_manage_rollout(actor, rollout.service.team.slug),
            "can_promote": can_promote_rollout(actor, rollout.service.team.slug),
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

# What each decision did, as the page's message says it.
STEERED = {
    "promote": "Promoted by hand: the canary takes all the traffic.",
    "abort": "Aborted: all the traffic is back on the baseline.",
    "retry": "The analysis starts again from the first step.",
    "extend": "The analysis goes on with more ticks, keeping its evidence.",
}


@login_required
@require_POST
def rollout_action(request, rollout_id):
    """Promote anyway, abort, retry or extend, with a reason; the services check role and state."""
    rollout = _visible(request, rollout_id)
    actor = actor_from_request(request)
    form = RolloutActionForm(request.POST)
    if not form.is_valid():
        missing = form.errors.keys() == {"reason"} and not request.POST.get("reason", "").strip()
        messages.error(
            request,
            "Say why: a decision on a rollout needs a reason."
            if missing
            else f"Nothing was done. {field_problems(form)}",
        )
        return redirect("canary:rollout-detail", rollout_id=rollout.pk)
    d = form.cleaned_data
    steer = STEERING[d["action"]]
    extra = {"ticks": d.get("ticks")} if d["action"] == "extend" else {}
    try:
        steer(actor=actor, rollout=rollout, reason=d["reason"], **extra)
    except KilnError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, STEERED[d["action"]])
    return redirect("canary:rollout-detail", rollout_id=rollout.pk)
