"""`{{ event.target|target_url }}`: the page of the object an audit target names, or ""."""

from __future__ import annotations

from django import template
from django.urls import NoReverseMatch, reverse

register = template.Library()

# Target prefix (`<app>.<model>`, as audit.record writes it) -> URL name of that object's page.
TARGET_PAGES = {
    "portal.environment": "portal:environment-detail",
    "chaos.chaosexperiment": "chaos:experiment-detail",
    "canary.rollout": "canary:rollout-detail",
}


@register.filter
def target_url(target: str) -> str:
    """The page of the named object, or "" when it has none (or the id is not one)."""
    kind, _, key = str(target).partition(":")
    name = TARGET_PAGES.get(kind)
    if not name or not key:
        return ""
    try:
        return reverse(name, args=[key])
    except NoReverseMatch:
        return ""
