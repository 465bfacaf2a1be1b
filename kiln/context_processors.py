"""Template context shared by every page: the navigation, built from the routes that exist."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from kiln.identity.permissions import (
    APPROVER,
    Actor,
    actor_from_request,
    can_view_audit,
    has_role,
)


def _anyone(actor: Actor) -> bool:
    return True


def _approvers(actor: Actor) -> bool:
    return has_role(actor, APPROVER)


# (label, url name, who sees it). An entry shows once its app serves that page, and only
# to people the page would let in.
NAVIGATION: tuple[tuple[str, str, Callable[[Actor], bool]], ...] = (
    ("Environments", "portal:environment-list", _anyone),
    ("Approvals", "portal:approval-queue", _approvers),
    ("Rollouts", "canary:rollout-list", _anyone),
    ("Chaos", "chaos:experiment-list", _anyone),
    ("Scheduler", "scheduler:overview", _anyone),
    ("Audit", "audit:explorer", can_view_audit),
)


def navigation(request: HttpRequest) -> dict:
    """The menu entries this person may open, and their Actor (for the roles shown)."""
    actor = actor_from_request(request) if getattr(request, "user", None) is not None else None
    items = []
    for label, name, visible in NAVIGATION:
        if actor is None or not visible(actor):
            continue
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        items.append({"label": label, "url": url, "active": False})
    # The entry whose URL is the longest prefix of this page is the active one
    # (/environments/approvals/ is Approvals, not Environments).
    matching = [item for item in items if request.path.startswith(item["url"])]
    if matching:
        max(matching, key=lambda item: len(item["url"]))["active"] = True
    roles = sorted(actor.roles) if actor is not None else []
    return {"nav_items": items, "nav_actor": actor, "nav_roles": roles}
