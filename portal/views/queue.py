"""The approval queue (inline errors per row) and approve/reject."""

from __future__ import annotations

from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from kiln.errors import InvalidInput, KilnError
from kiln.form_errors import field_problems
from kiln.identity.permissions import (
    actor_from_request,
    approval_basis,
    can_approve,
)
from portal import budget_reads, selectors, services
from portal.forms import ReasonForm
from portal.lifecycle import Status
from portal.models import Environment
from portal.services.plan import environment_plan
from portal.views.common import as_sentence, env_or_404
from portal.words import approval_basis_words

# Session key: {public_id: message} of the last refused decision, shown on that row once.
QUEUE_ERRORS = "portal_queue_errors"


@login_required
def approval_queue(request: HttpRequest) -> HttpResponse:
    """Requests waiting for approval, with approve and reject (reason required) buttons."""
    actor = actor_from_request(request)
    if not can_approve(actor):
        raise PermissionDenied("Only approvers see the approval queue.")
    errors = dict(request.session.pop(QUEUE_ERRORS, {}))
    now = timezone.now()
    rows, months = [], {}
    for env in selectors.approval_queue(viewer=actor):
        approvals = [d for d in env.decisions.all() if d.decision == "approve"]
        needed = selectors.approvals_needed(environment=env)
        rows.append(
            {
                "env": env,
                "approvals": approvals,
                "needed": needed,
                # On whose behalf each approval counts, and the viewer's own would.
                "tally": selectors.approval_tally(env),
                "next_place": min(len(approvals) + 1, needed),
                "basis": approval_basis_words(approval_basis(actor, env.team.slug), env.team.slug),
                "own": env.request.requested_by.get_username() == actor.username,
                "decided": selectors.has_decided(env, actor.username),
                "lifetime_cost": (env.hourly_cost * env.request.ttl_hours).quantize(
                    Decimal("0.01")
                ),
                "age": now - env.created_at,
                "error": errors.pop(env.public_id, ""),
                "plan": environment_plan(environment=env),
                "over_budget": budget_reads.pending_over_budget(
                    environment=env, now=now, months=months
                ),
            }
        )
    for refusal in errors.values():  # its row is gone (decided meanwhile): said at the top
        messages.error(request, refusal)
    return render(request, "portal/approvals.html", {"rows": rows})


@login_required
@require_POST
def environment_decide(request: HttpRequest, public_id: str) -> HttpResponse:
    """Approve or reject from the queue or the detail page."""
    env = env_or_404(request, public_id)
    actor = actor_from_request(request)
    form = ReasonForm(request.POST)
    try:
        if not form.is_valid():  # refused whole: never decided without the reason given
            raise InvalidInput(f"Nothing was decided. {field_problems(form)}")
        reason = form.cleaned_data["reason"]
        if request.POST.get("decision") == "reject":
            services.environment_reject(actor=actor, environment=env, reason=reason)
            messages.success(request, f"Rejected {env.namespace}.")
        else:
            env = services.environment_approve(actor=actor, environment=env, reason=reason)
            messages.success(request, _approval_words(env))
    except KilnError as exc:
        # From the queue, shown on the request's own row (only approvers have a queue).
        from_queue = not request.POST.get("next") and can_approve(actor)
        if from_queue:
            request.session[QUEUE_ERRORS] = {env.public_id: as_sentence(exc.message)}
        else:
            messages.error(request, as_sentence(exc.message))
    target = request.POST.get("next", "")
    if not target.startswith("/") or not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}
    ):
        target = (
            reverse("portal:approval-queue") + f"#row-{env.public_id}"
            if can_approve(actor)
            else reverse("portal:environment-detail", args=[env.public_id])
        )
    return redirect(target)


def _approval_words(env: Environment) -> str:
    """What one approval did: approved the request, or counted towards the approvals it needs."""
    if env.status != Status.PENDING_APPROVAL:
        return f"Approved {env.namespace}."
    given = sum(1 for count in selectors.approval_tally(env) if count.place is not None)
    needed = selectors.approvals_needed(environment=env)
    return (
        f"Your approval of {env.namespace} is recorded: {given} of {needed}. "
        f"It waits for {needed - given} more approver{'s' if needed - given > 1 else ''}."
    )
