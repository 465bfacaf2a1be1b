"""Lifecycle forms of the environment page: defer teardown (do-not-disrupt), keep an idle environment,
put it to sleep and wake it."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from kiln.errors import KilnError
from kiln.identity.permissions import actor_from_request
from portal import conf, services
from portal.services import sleep, sleep_triggers
from portal.views.common import env_or_404


class DeferForm(forms.Form):
    """Hold teardown for some minutes past expiry, for a reason."""

    minutes = forms.IntegerField(min_value=1, max_value=525600)
    reason = forms.CharField(max_length=500)


def _error_text(exc: KilnError) -> str:
    fields = exc.extra.get("fields") or {}
    return "; ".join(sum(fields.values(), [])) or exc.message


@login_required
@require_POST
def environment_defer(request: HttpRequest, public_id: str) -> HttpResponse:
    """Defer teardown past expiry (bounded by the class's maximum deferral)."""
    env = env_or_404(request, public_id)
    form = DeferForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give whole minutes and a reason to defer teardown.")
    else:
        try:
            services.environment_defer_teardown(
                actor=actor_from_request(request), environment=env, **form.cleaned_data
            )
            messages.success(request, f"Teardown deferred by {form.cleaned_data['minutes']} min.")
        except KilnError as exc:
            messages.error(request, _error_text(exc))
    return redirect("portal:environment-detail", public_id=public_id)


@login_required
@require_POST
def environment_keep(request: HttpRequest, public_id: str) -> HttpResponse:
    """Keep an environment proposed as idle."""
    env = env_or_404(request, public_id)
    try:
        services.environment_keep(actor=actor_from_request(request), environment=env)
        messages.success(request, "Kept: it is no longer proposed for early teardown.")
    except KilnError as exc:
        messages.error(request, _error_text(exc))
    return redirect("portal:environment-detail", public_id=public_id)


@login_required
@require_POST
def environment_sleep(request: HttpRequest, public_id: str) -> HttpResponse:
    """Put a READY environment to sleep."""
    env = env_or_404(request, public_id)
    try:
        sleep.sleep_environment(
            env, actor=actor_from_request(request), reason="asked for on its page"
        )
        messages.success(request, "Going to sleep: workloads, control plane and nodes to zero.")
    except KilnError as exc:
        messages.error(request, _error_text(exc))
    return redirect("portal:environment-detail", public_id=public_id)


@login_required
@require_POST
def environment_wake(request: HttpRequest, public_id: str) -> HttpResponse:
    """Wake a sleeping environment."""
    env = env_or_404(request, public_id)
    try:
        sleep.wake_environment(
            env, actor=actor_from_request(request), reason="asked for on its page"
        )
        messages.success(request, "Waking: everything comes back as it was.")
    except KilnError as exc:
        messages.error(request, _error_text(exc))
    return redirect("portal:environment-detail", public_id=public_id)


def sleep_context(env) -> dict:
    """The environment page's sleep card: whether its class sleeps, what sleeping saves a day
    (priced as the estimate is), the team's schedule's hours asleep and the last wake's time."""
    lifecycle = conf.class_lifecycle(env.env_class)
    hours = sleep_triggers.asleep_hours_per_day(env.team_id)
    return {
        "may_sleep": lifecycle.may_sleep,
        "sleep_after_hours": None
        if lifecycle.sleep_after is None
        else round(lifecycle.sleep_after / 3600, 1),
        "sleep_savings": sleep.sleep_savings(env, asleep_hours_per_day=hours),
        "falling_asleep": env.status == "SLEEPING" and env.slept_at is None,
    }
