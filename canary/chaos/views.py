"""Chaos pages: list, create, detail with the live lease (htmx polling), abort. Thin: services do the work."""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from canary.chaos import actuators, chaos_mesh, stops
from canary.chaos import selectors as chaos_selectors
from canary.chaos import services as chaos_services
from canary.chaos.forms_faults import ChaosMeshFormFields
from canary.chaos.models import ExperimentStatus, FaultKind, LeverScope
from canary.ownership import namespaces_of
from kiln.cluster import DeliveryError
from kiln.errors import Conflict, KilnError, NotFound
from kiln.form_errors import add_service_errors, values_for_service
from kiln.identity.permissions import (
    ENGINEER,
    actor_from_request,
    can_operate_chaos_lever,
    can_run_chaos,
    has_role,
)


class ExperimentForm(ChaosMeshFormFields, forms.Form):
    """The create page's form; the service validates the experiment itself."""

    name = forms.CharField(max_length=100)
    namespace = forms.ChoiceField(
        choices=[],
        error_messages={"invalid_choice": "not a namespace your team owns"},
        help_text="Your team's namespaces: its environments' and those labelled "
        "kiln.dev/team with its name.",
    )
    selector = forms.CharField(max_length=500, help_text="matchLabels, e.g. app=web,tier=front")
    service = forms.CharField(
        max_length=253,
        required=False,
        help_text="host: the target of HTTP faults, and where error-rate and latency stop "
        "conditions read their metrics",
    )
    fault = forms.ChoiceField(choices=FaultKind.choices)
    delay_ms = forms.IntegerField(required=False, min_value=1, label="Delay (ms)")
    abort_http_status = forms.IntegerField(required=False, label="Abort HTTP status")
    percent = forms.FloatField(
        initial=100.0,
        label="Requests affected (%)",
        help_text="HTTP faults: the share of the service's requests that get the fault. 25 "
        "means about 1 request in 4 is delayed or aborted; the other 3 pass untouched.",
    )
    duration_seconds = forms.IntegerField(min_value=1, initial=300, label="Duration (s)")
    max_duration_seconds = forms.IntegerField(min_value=1, initial=600, label="Hard maximum (s)")
    # No min_value: the service names one range for both ends (1 to 2147483647).
    max_pods = forms.IntegerField(
        required=False,
        label="Blast radius: max pods",
        help_text="The most pods the fault may touch, however many the selector matches: 2 "
        "means at most 2 pods.",
    )
    max_percent = forms.FloatField(
        required=False,
        label="Blast radius: max %",
        help_text="The most pods the fault may touch, as a share of the pods the selector "
        "matches: with 8 matching pods, 25 means at most 2. With max pods too, the smaller "
        "limit wins; for HTTP faults it also caps Requests affected. Give one or both.",
    )
    stop_error_rate = forms.FloatField(
        required=False,
        min_value=0,
        max_value=99.99,
        label="Stop when error rate above (%)",
        help_text="Of the service's requests in a window: 5 stops the experiment once more "
        "than 1 request in 20 fails.",
    )
    stop_p99_ms = forms.FloatField(required=False, min_value=0, label="Stop when p99 (ms) above")
    stop_on_rollback = forms.BooleanField(
        required=False, initial=True, label="Stop when a canary on the target rolls back"
    )
    continue_without_metrics = forms.BooleanField(
        required=False,
        label="Keep running when the metrics cannot be read",
        help_text="By default a stop condition that cannot be evaluated (the metrics source "
        "down or silent) aborts the experiment rather than let it run blind.",
    )
    may_overlap = forms.BooleanField(
        required=False,
        label="May overlap another experiment",
        help_text="Run even where another experiment targets the same pods or service, if "
        "that one allows overlaps too.",
    )
    # One token per rendered form: submitting it twice (a double click, a resent POST) makes
    # one experiment, as an Idempotency-Key does over the API.
    idempotency_key = forms.CharField(widget=forms.HiddenInput, required=False, max_length=200)

    def __init__(self, *args: Any, namespaces: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial.setdefault("idempotency_key", uuid.uuid4().hex)
        field = self.fields["namespace"]
        field.choices = [("", "choose a namespace")] + [(n, n) for n in namespaces]
        if not namespaces:
            field.help_text = (
                "Your team owns no namespace yet: request an environment first, or label a "
                "namespace kiln.dev/team with your team's name."
            )

    def clean_selector(self) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for part in self.cleaned_data["selector"].split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise forms.ValidationError("write key=value pairs separated by commas")
            pairs[key.strip()] = value.strip()
        if not pairs:
            raise forms.ValidationError("at least one label")
        return pairs

    def experiment_data(self) -> dict[str, Any]:
        """The service's `data`: a field Django refused keeps its raw text, for the service to
        check the others around it (`kiln.form_errors`); a refused stop condition is left out."""
        d = values_for_service(self)
        cleaned = self.cleaned_data
        conds: list[dict[str, Any]] = []
        if cleaned.get("stop_error_rate") is not None:
            # The form speaks percent, the condition (and the API) a fraction of requests.
            threshold = round(cleaned["stop_error_rate"] / 100, 6)
            conds.append({"kind": "error-rate-above", "threshold": threshold})
        if cleaned.get("stop_p99_ms") is not None:
            conds.append({"kind": "latency-p99-above-ms", "threshold": cleaned["stop_p99_ms"]})
        if cleaned.get("stop_on_rollback"):
            conds.append({"kind": "canary-rolled-back"})
        keys = (
            "name namespace selector service fault delay_ms abort_http_status percent "
            "duration_seconds max_duration_seconds max_pods max_percent"
        ).split()
        data = {k: d.get(k) for k in keys}
        data.update(self.kind_data(d))
        data["stop_conditions"] = conds
        data["continue_without_metrics"] = bool(cleaned.get("continue_without_metrics"))
        data["may_overlap"] = bool(cleaned.get("may_overlap"))
        return data


def _field_of(key: str) -> str:
    """The form field that shows a service error key: the API's `blast_radius` rule is about
    the two blast radius fields; a stop condition's problem sits with the stop fields."""
    if key == "blast_radius":
        return "max_pods"
    if key.startswith("stop_conditions"):
        return "stop_error_rate"
    return key


def _status_badge(status: str) -> str:
    return {
        ExperimentStatus.RUNNING: "warn",
        ExperimentStatus.COMPLETED: "ok",
        ExperimentStatus.ABORTED: "bad",
        ExperimentStatus.EXPIRED: "bad",
    }.get(status, "muted")


def experiment_list_context(*, viewer, query) -> dict:
    """The list's experiments for the viewer and the query's status, with each lease's state:
    the page renders them, and the live list (canary/chaos/consumers.py) renders them again
    whenever they change."""
    status = query.get("status") or None
    if status not in ExperimentStatus.values:
        status = None
    rows = [
        {"exp": e, "badge": _status_badge(e.status), "lease": chaos_selectors.lease_state(e)}
        for e in chaos_selectors.experiment_list(viewer=viewer, status=status)[:200]
    ]
    return {"rows": rows, "status": status or ""}


@login_required
def experiment_list(request: HttpRequest) -> HttpResponse:
    """Every experiment the viewer may see, newest first; live."""
    actor = actor_from_request(request)
    context = experiment_list_context(viewer=actor, query=request.GET)
    context.update(
        statuses=ExperimentStatus.choices,
        can_create=has_role(actor, ENGINEER),
        levers=lever_strip(actor),
    )
    return render(request, "chaos/list.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def experiment_create(request: HttpRequest) -> HttpResponse:
    """Define and start an experiment on a namespace the viewer's team owns."""
    actor = actor_from_request(request)
    if not has_role(actor, ENGINEER):
        raise PermissionDenied("Only engineers and platform admins run chaos experiments.")
    try:
        namespaces = namespaces_of(lambda team: can_run_chaos(actor, team), in_cluster_only=True)
    except DeliveryError:  # the cluster is away: no namespace can be checked, none offered
        namespaces = []
    form = ExperimentForm(request.POST or None, namespaces=namespaces)
    status = 200
    if request.method == "POST":
        data = form.experiment_data()
        # The service's checks run on every field Django accepted: all problems in one round,
        # each on its field (the blast radius rule on the blast radius fields).
        add_service_errors(
            form, chaos_services.experiment_errors(actor=actor, data=data), field_of=_field_of
        )
        if form.is_valid():
            try:
                exp, _ = chaos_services.experiment_submit(
                    actor=actor,
                    data=data,
                    idempotency_key=form.cleaned_data.get("idempotency_key") or "",
                )
            except KilnError as exc:
                add_service_errors(form, exc.extra.get("fields") or {}, field_of=_field_of)
                if not exc.extra.get("fields") or isinstance(exc, Conflict):
                    # A lever or an overlap: the message names the lever or the other experiment.
                    form.add_error(None, exc.message)
                status = exc.http_status
            else:
                messages.success(request, f"Experiment {exp.name} started.")
                return redirect("chaos:experiment-detail", experiment_id=exp.pk)
        if form.errors and status < 400:
            status = 400
    return render(
        request,
        "chaos/create.html",
        {"form": form, "levers": lever_strip(actor)},
        status=status,
    )


def _visible(request: HttpRequest, experiment_id: Any):
    """The experiment, or a 404 page when it is missing or not the viewer's to see (same answer)."""
    try:
        return chaos_selectors.experiment_get(
            viewer=actor_from_request(request), experiment_id=experiment_id
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc


def _detail_context(request: HttpRequest, experiment_id: Any) -> dict[str, Any]:
    actor = actor_from_request(request)
    exp = _visible(request, experiment_id)
    stopped_by = (exp.end_evidence or {}).get("stop_condition")
    return {
        "exp": exp,
        "badge": _status_badge(exp.status),
        "lease": chaos_selectors.lease_state(exp),
        "injections": list(chaos_selectors.injection_list(exp)),
        "can_abort": can_run_chaos(actor, exp.team.slug) and not exp.is_terminal,
        "can_recheck": can_run_chaos(actor, exp.team.slug),
        "magnitude": chaos_mesh.describe(exp.fault, exp.params or {}),
        "effective_percent": actuators.effective_percent(chaos_services.fault_spec(experiment=exp)),
        "now": timezone.now(),
        "levers": lever_strip(actor),
        "stopped_by": stopped_by,
        "stopped_by_words": stops.in_words(stopped_by) if stopped_by else "",
        "condition_words": [stops.in_words(c) for c in exp.stop_conditions or []],
    }


@login_required
def experiment_detail(request: HttpRequest, experiment_id) -> HttpResponse:
    """An experiment with its live lease state and injection timeline."""
    return render(request, "chaos/detail.html", _detail_context(request, experiment_id))


@login_required
def experiment_lease(request: HttpRequest, experiment_id) -> HttpResponse:
    """The live lease or injections panel (`?part=injections`), polled by htmx while the experiment
    runs; once it has ended the whole page reloads (status, end time, no abort, no more polling)."""
    part = "_injections.html" if request.GET.get("part") == "injections" else "_lease.html"
    context = _detail_context(request, experiment_id)
    response = render(request, f"chaos/{part}", context)
    if context["exp"].is_terminal:
        response["HX-Refresh"] = "true"
    return response


@login_required
@require_POST
def experiment_abort(request: HttpRequest, experiment_id) -> HttpResponse:
    """Abort now; the fault is reverted before the page comes back."""
    actor = actor_from_request(request)
    exp = _visible(request, experiment_id)
    try:
        chaos_services.experiment_abort(
            actor=actor, experiment=exp, reason=request.POST.get("reason", "")[:200]
        )
    except KilnError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Experiment aborted; its fault is reverted.")
    return redirect("chaos:experiment-detail", experiment_id=exp.pk)


def lever_strip(actor: Any) -> dict[str, Any]:
    """What every chaos page shows of the safety levers: the platform's state and every
    engaged lever the viewer may see."""
    levers = chaos_selectors.levers_for(viewer=actor)
    platform = next((lever for lever in levers if lever.scope == LeverScope.PLATFORM), None)
    return {
        "platform": platform,
        "engaged": [lever for lever in levers if lever.engaged],
    }


def _lever_context(actor: Any) -> dict[str, Any]:
    """The levers page: the platform lever and one per team the viewer sees or belongs to."""
    levers = chaos_selectors.levers_for(viewer=actor)
    platform = next((lever for lever in levers if lever.scope == LeverScope.PLATFORM), None)
    by_team = {lever.team.slug: lever for lever in levers if lever.scope == LeverScope.TEAM}
    teams = sorted(set(by_team) | set(chaos_selectors.lever_teams(viewer=actor)))
    return {
        "platform": {
            "lever": platform,
            "can_move": can_operate_chaos_lever(actor, None),
        },
        "teams": [
            {
                "slug": slug,
                "lever": by_team.get(slug),
                "can_move": can_operate_chaos_lever(actor, slug),
            }
            for slug in teams
        ],
        "levers": lever_strip(actor),
    }


@login_required
def lever_list(request: HttpRequest) -> HttpResponse:
    """The safety levers: engage one to stop every experiment in its scope, release it after."""
    return render(request, "chaos/levers.html", _lever_context(actor_from_request(request)))


@login_required
@require_POST
def lever_move(request: HttpRequest, action: str, team: str | None = None) -> HttpResponse:
    """Engage or release the platform lever or a team's; a refusal re-renders the page with
    the reason and the status that names it (403 not yours, 400 no reason, 409 already so)."""
    if action not in ("engage", "release"):
        raise Http404("No such lever action.")
    actor = actor_from_request(request)
    move = chaos_services.lever_engage if action == "engage" else chaos_services.lever_release
    try:
        if team is not None:
            chaos_selectors.lever_get(viewer=actor, team_slug=team)
        move(actor=actor, team_slug=team, reason=request.POST.get("reason", ""))
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except KilnError as exc:
        context = _lever_context(actor)
        context["error"] = {"message": exc.message, "team": team, "action": action}
        return render(request, "chaos/levers.html", context, status=exc.http_status)
    scope = "The platform lever" if team is None else f"The lever of team {team}"
    messages.success(
        request,
        f"{scope} is engaged: every experiment in its scope is stopped and reverted."
        if action == "engage"
        else f"{scope} is released: experiments may start again.",
    )
    return redirect("chaos:lever-list")
