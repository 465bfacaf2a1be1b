"""The environment page: tabs, how to connect, kubeconfig and manifest downloads, live progress, extend and teardown (confirmed by typing the name)."""

from __future__ import annotations

from decimal import Decimal

import yaml
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from kiln.errors import KilnError
from kiln.form_errors import field_problems
from kiln.identity.permissions import (
    AUDITOR,
    actor_from_request,
    can_act_on_environment,
    can_approve,
    has_role,
)
from portal import budget_reads, conf, resource_tree, selectors, services
from portal.connect import connection, kubeconfig
from portal.forms import ExtendForm, ReasonForm
from portal.lifecycle import Status, badge, label, teardown_requested
from portal.models import PolicyDecision
from portal.views import refused_words
from portal.views.common import ACTIVE, action_view, env_or_404, kept_values
from portal.views.lifecycle import sleep_context
from portal.words import extended_hours, phrases

# What the Actions card says while there is nothing to do but wait (or nothing left to do).
WAITING = {
    Status.SUBMITTED: "Submitted: the policies are checking it; nothing to do until they decide.",
    Status.PENDING_APPROVAL: "Waiting for approval: nothing to do until an approver decides.",
    Status.APPROVED: "Approved and queued: nothing to do until it is provisioned and ready.",
    Status.PROVISIONING: "Provisioning: nothing to do until it is ready (see the Progress tab).",
    Status.EXPIRING: "Expiring: its TTL ran out; it is torn down next.",
    Status.TEARING_DOWN: "Tearing down: nothing to do; it is deleted once every step is done.",
    Status.DELETED: "Deleted: nothing is left to act on.",
    Status.WAKING: "Waking: everything comes back as it was (see the Progress tab).",
}
# EXPIRING because a person asked for the teardown, not because the TTL ran out.
TEARDOWN_ASKED = "Teardown requested: it is torn down next."
# Where the page shows the sleep card (what sleeping saves, the sleep and wake buttons).
SLEEP_CARD = {Status.READY, Status.SLEEPING, Status.WAKING}


def _detail_context(request: HttpRequest, env) -> dict:
    actor = actor_from_request(request)
    pending = env.status == Status.PENDING_APPROVAL
    # A request still waiting after this person's decision: their approval, the first of two.
    decided = pending and selectors.has_decided(env, actor.username)
    return {
        "env": env,
        "badge": badge(env.status),
        "status_label": label(env.status, env.status_reason),
        "active": Status(env.status) in ACTIVE,
        "steps": selectors.environment_steps(env),
        "resources": selectors.environment_resources(env),
        "can_act": can_act_on_environment(actor, env.team.slug),
        "can_decide": can_approve(actor, env.team.slug, env.request.requested_by.get_username())
        and pending
        and not decided,
        "decided": decided,
        "waiting": _waiting(env),
    }


def _waiting(env) -> str:
    """What the Actions card says while there is nothing to do but wait (WAITING)."""
    if teardown_requested(env.status, env.status_reason):
        return TEARDOWN_ASKED
    return WAITING.get(Status(env.status), "")


@login_required
def environment_detail(request: HttpRequest, public_id: str) -> HttpResponse:
    """Tabs: overview (status, how to connect, actions), progress, timeline, policy, manifests, cost."""
    env = env_or_404(request, public_id)
    context = _detail_context(request, env)
    timeline = selectors.environment_timeline(env)
    events = [(e.actor, e.action, e.data) for e in timeline]
    decisions = list(env.policy_decisions.all())
    extended = extended_hours(events)
    ttl_total = env.request.ttl_hours + extended
    context.update(
        {
            "timeline": list(zip(timeline, phrases(events), strict=True)),
            "ttl_total": ttl_total,
            "ttl_extended": extended,
            "connection": connection(namespace=env.namespace, manifests=env.manifests)
            if env.status == Status.READY
            else None,
            "manifests": [
                {
                    "kind": m.get("kind", ""),
                    "name": m.get("metadata", {}).get("name", ""),
                    "yaml": yaml.safe_dump(m, sort_keys=False),
                }
                for m in env.manifests
            ],
            "decisions": decisions,
            "denials": [d for d in decisions if not d.allowed],
            # The request form counts the request's checks, the plan its manifests': both here.
            "decision_stages": _stage_counts(decisions),
            "approvals": selectors.approval_tally(env),
            "cost": budget_reads.environment_cost(environment=env),
            "lifetime_cost": (env.hourly_cost * ttl_total).quantize(Decimal("0.01")),
            "is_auditor": has_role(actor_from_request(request), AUDITOR),
            "can_resubmit": context["can_act"] and env.status in (Status.DENIED, Status.REJECTED),
            "kept": kept_values(request, public_id),
        }
    )
    if env.status in SLEEP_CARD:
        context.update(sleep_context(env))
    return render(request, "portal/detail.html", context)


@login_required
def environment_kubeconfig(request: HttpRequest, public_id: str) -> HttpResponse:
    """A kubeconfig whose context is the environment's namespace (READY environments only)."""
    env = env_or_404(request, public_id)
    if env.status != Status.READY:
        raise Http404("only a READY environment has a kubeconfig")
    conn = connection(namespace=env.namespace, manifests=env.manifests)
    body = kubeconfig(
        conn=conn,
        server=conf.kubeconfig_server(),
        issuer=settings.KILN_JWT_ISSUER,
        username=actor_from_request(request).username,
    )
    response = HttpResponse(body, content_type="application/yaml")
    response["Content-Disposition"] = f'attachment; filename="{env.namespace}.kubeconfig"'
    return response


@login_required
def environment_manifests(request: HttpRequest, public_id: str) -> HttpResponse:
    """Every composed manifest as one multi-document YAML file."""
    env = env_or_404(request, public_id)
    if not env.manifests:
        raise Http404("nothing composed yet")
    response = HttpResponse(
        yaml.safe_dump_all(env.manifests, sort_keys=False), content_type="application/yaml"
    )
    response["Content-Disposition"] = f'attachment; filename="{env.namespace}-manifests.yaml"'
    return response


@login_required
def environment_progress(request: HttpRequest, public_id: str) -> HttpResponse:
    """htmx partial polled while the environment is changing; asks for a full refresh when it settles."""
    env = env_or_404(request, public_id)
    context = _detail_context(request, env)
    response = render(request, "portal/_progress.html", context)
    if not context["active"] and request.GET.get("was") in {s.value for s in ACTIVE}:
        response["HX-Refresh"] = "true"
    return response


@login_required
def environment_tree(request: HttpRequest, public_id: str) -> HttpResponse:
    """htmx partial polled by the Resources tab: the objects' tree, health, sync and events."""
    env = env_or_404(request, public_id)
    return render(
        request, "portal/_tree.html", {"env": env, "tree": resource_tree.environment_tree(env)}
    )


environment_extend = action_view(
    services.environment_extend,
    done="Extended by {hours} h.",
    form=ExtendForm,
    invalid=refused_words.extension,
)


@login_required
@require_POST
def environment_teardown(request: HttpRequest, public_id: str) -> HttpResponse:
    """Request teardown."""
    env = env_or_404(request, public_id)
    if request.POST.get("confirm", "").strip() != env.name:
        messages.error(
            request, f"Nothing was torn down: type the environment's name, {env.name}, to confirm."
        )
        return redirect("portal:environment-detail", public_id=public_id)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Nothing was torn down. {field_problems(form)}")
        return redirect("portal:environment-detail", public_id=public_id)
    reason = form.cleaned_data["reason"]
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


def _stage_counts(decisions) -> str:
    """`5 on the request, 18 on the manifests`: the checks of each stage, in words."""
    on_request = sum(1 for d in decisions if d.stage == PolicyDecision.REQUEST)
    on_manifests = len(decisions) - on_request
    parts = [f"{on_request} on the request"] if on_request else []
    if on_manifests:
        parts.append(f"{on_manifests} on the composed manifest{'s' if on_manifests != 1 else ''}")
    return ", ".join(parts)
