"""`{{ event.target|target_url }}`: the page of the object an audit target names, or "";
`{{ event.action|break_at_dots }}`: an action name that wraps between its parts."""

from __future__ import annotations

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

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


@register.filter
def break_at_dots(name: str) -> SafeString:
    """The name escaped, with a line-break opportunity after each dot
    (`portal.environment.workloads_removed` wraps between its parts, not mid-word)."""
    text = str(escape(name))
    return mark_safe(text.replace(".", ".<wbr>"))  # noqa: S308 - escaped above
