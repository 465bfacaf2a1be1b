"""Helpers the portal pages share: the statuses that change on their own, the visible environment
or 404, and an action posted from an environment's page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from kiln.errors import KilnError, NotFound
from kiln.form_errors import field_problems
from kiln.identity.permissions import actor_from_request
from portal import selectors
from portal.lifecycle import Status

ACTIVE = {
    Status.APPROVED,
    Status.PROVISIONING,
    Status.EXPIRING,
    Status.TEARING_DOWN,
    Status.WAKING,
}


def env_or_404(request: HttpRequest, public_id: str):
    """The environment the viewer may see, or a 404 (missing and hidden answer alike)."""
    try:
        return selectors.environment_get(viewer=actor_from_request(request), public_id=public_id)
    except NotFound as exc:
        raise Http404("no such environment") from exc


def as_sentence(text: str) -> str:
    """`text` (the API's words, which start lower case) as a page's sentence."""
    text = text.strip()
    if text and text[-1] not in ".!?":
        text += "."
    return text[:1].upper() + text[1:]


def error_text(exc: KilnError) -> str:
    """A refusal as the page shows it, as a sentence: the fields' errors, else the error's
    message."""
    fields = exc.extra.get("fields") or {}
    return as_sentence("; ".join(sum(fields.values(), [])) or exc.message)


KEPT = "kiln.portal.refused_form"  # the session's key for a refused form's values


def _keep_values(request: HttpRequest, bound: forms.Form, public_id: str) -> None:
    """Keep what a refused form said, so the page shows it again rather than its defaults."""
    values = {name: request.POST[name][:1000] for name in bound.fields if name in request.POST}
    request.session[KEPT] = {"environment": public_id, "values": values}


def kept_values(request: HttpRequest, public_id: str) -> dict[str, str]:
    """What the last refused form on this environment's page said (once; otherwise empty)."""
    kept = request.session.pop(KEPT, None)
    if not kept or kept.get("environment") != public_id:
        return {}
    return kept.get("values") or {}


def action_view(
    act: Callable[..., Any],
    *,
    done: str | Callable[[Any], str],
    form: type[forms.Form] | None = None,
    invalid: str | Callable[[Any], str] = "",
    **fixed: Any,
) -> Callable[[HttpRequest, str], HttpResponse]:
    """The view of a POST from the environment page: `act(actor=, environment=, **the form's
    data, **fixed)`, then `done` (formatted with the form's data, or what `done(environment)`
    says of the environment as it was before) or the refusal's text as the page's message,
    and back to the page. A `form` that does not validate says `invalid` (or
    what `invalid(environment)` says, to name the environment's own limits) and changes nothing.
    A refused form's values come back in it (`kept_values`)."""

    @login_required
    @require_POST
    def view(request: HttpRequest, public_id: str) -> HttpResponse:
        env = env_or_404(request, public_id)
        bound = form(request.POST) if form is not None else None
        if bound is not None and not bound.is_valid():
            said = invalid(env) if callable(invalid) else invalid
            messages.error(request, f"{said} {field_problems(bound)}".strip())
            _keep_values(request, bound, public_id)
        else:
            data = bound.cleaned_data if bound is not None else {}
            try:
                said = done(env) if callable(done) else done.format(**data)
                act(actor=actor_from_request(request), environment=env, **data, **fixed)
                messages.success(request, said)
            except KilnError as exc:
                messages.error(request, error_text(exc))
                if bound is not None:
                    _keep_values(request, bound, public_id)
        return redirect("portal:environment-detail", public_id=public_id)

    return view
