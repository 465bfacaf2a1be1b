"""Template context shared by every page: the navigation, built from the routes that exist."""

from __future__ import annotations

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from kiln.identity.permissions import actor_from_request

# (label, url name). An entry shows only once its app serves that page.
NAVIGATION = (
    ("Environments", "portal:environment-list"),
    ("Approvals", "portal:approval-queue"),
    ("Rollouts", "canary:rollout-list"),
    ("Chaos", "canary:experiment-list"),
    ("Scheduler", "scheduler:overview"),
    ("Audit", "audit:explorer"),
)


def navigation(request: HttpRequest) -> dict:
    items = []
    for label, name in NAVIGATION:
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        items.append({"label": label, "url": url, "active": request.path.startswith(url)})
    actor = actor_from_request(request) if getattr(request, "user", None) is not None else None
    return {"nav_items": items, "nav_actor": actor}
