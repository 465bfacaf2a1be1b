"""Portal pages: my environments, the request form with a live estimate and class limits, resubmitting a denied or rejected request."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from kiln.errors import KilnError
from kiln.identity.permissions import (
    ENGINEER,
    actor_from_request,
    has_role,
)
from portal import budget_reads, selectors, services
from portal.forms import EnvironmentRequestForm, class_limits
from portal.lifecycle import TERMINAL, TTL_EXPIRED_PREFIX, Status, badge, label
from portal.services import cost, gate
from portal.validation import field_errors
from portal.views.common import env_or_404


def environment_list_context(*, viewer, query) -> dict:
    """The list's rows for the viewer and the query's filters: the page renders them, and the
    live list (portal/consumers.py) renders them again whenever they change."""
    filters = selectors.EnvironmentFilter(
        team=query.get("team", ""),
        status=query.get("status", ""),
        env_class=query.get("env_class", ""),
        q=query.get("q", ""),
        requested_by=viewer.username if query.get("mine") else "",
    )
    page = Paginator(selectors.environment_list(viewer=viewer, filters=filters), 25).get_page(
        query.get("page")
    )
    rows = [
        {
            "env": e,
            "badge": badge(e.status),
            "label": label(e.status, e.status_reason),
            "ended": e.status in TERMINAL,  # no expiry or price to show any more
        }
        for e in page
    ]
    return {
        "rows": rows,
        "page": page,
        "filters": filters,
        "pager_query": "".join(
            f"&{name}={getattr(filters, name)}" for name in ("status", "env_class", "team", "q")
        ),
        "can_request": has_role(viewer, ENGINEER),
    }


def _sentence(text: str) -> str:
    """`text` ending as a sentence does (the policies' messages may leave the stop out)."""
    text = text.strip()
    return text if not text or text[-1] in ".!?" else f"{text}."


@login_required
def environment_list(request: HttpRequest) -> HttpResponse:
    """My environments: the visible ones, filterable by status, class and team; live."""
    context = environment_list_context(viewer=actor_from_request(request), query=request.GET)
    context["statuses"] = [(s.value, label(s, TTL_EXPIRED_PREFIX)) for s in Status]
    context["querystring"] = request.GET.urlencode()
    return render(request, "portal/list.html", context)


_ESTIMATE_FIELDS = {"ttl_hours": "TTL", "cpu": "CPU", "memory_gib": "Memory", "gpu": "GPUs"}


def _estimate_from(data, actor=None) -> dict:
    """The estimate for the form's current values, or why there is none: the same field rules
    as the API, so no size Kiln would refuse reaches the price arithmetic or shows a price;
    with the team's budget beside it when the team has one."""
    args: dict = {"env_class": data.get("env_class") or "dev"}
    problems = []
    for field, name in _ESTIMATE_FIELDS.items():
        value = data.get(field, 0 if field == "gpu" else None)  # GPUs may be left out
        raw = "" if value is None else str(value).strip()
        try:
            args[field] = int(raw)
        except ValueError:
            problems.append(f"{name}: give a whole number.")
    if not problems:
        errors = field_errors({**args, "name": "x", "team": "x", "workload_class": "standard"})
        problems = [
            f"{_ESTIMATE_FIELDS.get(field, field)}: {message}"
            for field, messages in errors.items()
            for message in messages
        ]
    if problems:
        return {"estimate": None, "estimate_problems": problems}
    estimate = cost.estimate(
        **args,
        spot=bool(data.get("spot_node_pool")),
        tenant_control_plane=bool(data.get("tenant_control_plane")),
        database=bool(data.get("database")),
    )
    budget = None
    if actor is not None:
        budget = budget_reads.request_budget_preview(
            viewer=actor,
            team_slug=str(data.get("team") or ""),
            hourly=estimate["hourly"],
            ttl_hours=args["ttl_hours"],
        )
    return {"estimate": estimate, "estimate_problems": [], "budget": budget}


def _resubmittable(request: HttpRequest, public_id: str):
    """The denied or rejected environment whose request the form starts from, if any."""
    if not public_id:
        return None
    env = env_or_404(request, public_id)
    if env.status not in (Status.DENIED, Status.REJECTED):
        return None
    return env


def _request_initial(env) -> dict:
    """The form's starting values: the earlier request, field for field."""
    initial = {f: getattr(env.request, f) for f in EnvironmentRequestForm.base_fields}
    initial["team"] = env.team.slug
    return initial


@login_required
def environment_request(request: HttpRequest) -> HttpResponse:
    """The request form; on success, the new environment's page."""
    actor = actor_from_request(request)
    teams = list(selectors.teams_for(actor).values_list("slug", flat=True))
    if not has_role(actor, ENGINEER) or not teams:
        raise PermissionDenied("Only engineers of a team can request environments.")
    resubmit_of = _resubmittable(request, request.GET.get("from", ""))
    initial = _request_initial(resubmit_of) if resubmit_of else None
    form = EnvironmentRequestForm(request.POST or None, teams=teams, initial=initial)
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
            if env.status == Status.DENIED:
                # On record (audited) but not granted: an error, with the policies' own words
                # (the status reason also names each policy and object, for the API and audit).
                said = [d.message for d in env.policy_decisions.all() if not d.allowed]
                messages.error(
                    request,
                    f"Requested {env.namespace}: denied by policy. "
                    f"{_sentence(' '.join(said) or env.status_reason)} See the Policy tab.",
                )
            else:
                messages.success(request, f"Requested {env.namespace}: {label(env.status)}.")
            return redirect("portal:environment-detail", public_id=env.public_id)
    source = request.POST if request.method == "POST" else {f: form[f].value() for f in form.fields}
    return render(
        request,
        "portal/request.html",
        {
            "form": form,
            "class_limits": class_limits(),
            "resubmit_of": resubmit_of,
            **_estimate_from(source, actor),
        },
    )


def _draft_from(form: EnvironmentRequestForm) -> tuple[dict | None, list[str]]:
    """The form's values as a draft request for the policy check, or the field problems that
    keep it from being checked (a bad name alone does not: policies do not read it)."""
    form.is_valid()
    problems = {f: e for f, e in form.errors.items() if f not in ("name", "__all__")}
    if problems:
        words = [f"{form.fields[f].label or f}: {' '.join(e)}" for f, e in problems.items()]
        return None, words
    data = dict(form.cleaned_data)
    if "name" in form.errors:
        data["name"] = ""
    return data, []


@login_required
def environment_policy_check(request: HttpRequest) -> HttpResponse:
    """htmx partial: the request policies run on the form's current values (a dry run: nothing
    stored), so the form says what would be denied, in the API's words, before it is sent."""
    actor = actor_from_request(request)
    teams = list(selectors.teams_for(actor).values_list("slug", flat=True))
    if not has_role(actor, ENGINEER) or not teams:
        raise PermissionDenied("Only engineers of a team can request environments.")
    form = EnvironmentRequestForm(request.GET, teams=teams)
    draft, problems = _draft_from(form)
    evaluation = gate.request_dry_run(actor=actor, data=draft) if draft is not None else None
    # Policies do not read the name, but a typed name that is refused still stops the request:
    # said beside the verdict, so "allowed" does not read as "ready to send".
    typed = (request.GET.get("name") or "").strip()
    name_problem = " ".join(form.errors.get("name", [])) if typed else ""
    # The team's budget is a gate of its own, after the policies: say so where they allow it.
    budget = _estimate_from(request.GET, actor).get("budget") if evaluation else None
    return render(
        request,
        "portal/_policy_check.html",
        {
            "evaluation": evaluation,
            "problems": problems,
            "name_problem": name_problem,
            "budget_refuses": bool(budget and budget["outcome"] == "refused"),
        },
    )


@login_required
def environment_estimate(request: HttpRequest) -> HttpResponse:
    """htmx partial: the cost estimate for the form's current values."""
    return render(
        request, "portal/_estimate.html", _estimate_from(request.GET, actor_from_request(request))
    )
