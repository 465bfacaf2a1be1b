"""The experiment page's action on a revert the cluster never confirmed: revert and read it back
again (after removing the fault by hand, or once the cluster answers). Thin: the service decides."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from canary.chaos import selectors as chaos_selectors
from canary.chaos.services.injection import fault_revert_recheck
from kiln.errors import KilnError, NotFound
from kiln.identity.permissions import actor_from_request


@login_required
@require_POST
def injection_recheck(request: HttpRequest, experiment_id, injection_id: int) -> HttpResponse:
    """Revert and read back an unconfirmed injection; say whether the fault is now seen gone."""
    actor = actor_from_request(request)
    try:
        exp = chaos_selectors.experiment_get(viewer=actor, experiment_id=experiment_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    injection = exp.injections.filter(pk=injection_id).first()
    if injection is None:
        raise Http404("No such injection.")
    try:
        # What the person did, on record with a confirmation (no NUL: PostgreSQL's JSON refuses it).
        note = request.POST.get("note", "").replace("\x00", "")[:300]
        confirmed = fault_revert_recheck(injection_id=injection.pk, actor=actor, note=note)
    except KilnError as exc:
        messages.error(request, exc.message)
    else:
        if confirmed:
            messages.success(request, "Read back: the fault is gone. The revert is confirmed.")
        else:
            messages.error(request, "Read back: the cluster still shows the fault (see below).")
    return redirect("chaos:experiment-detail", experiment_id=exp.pk)
