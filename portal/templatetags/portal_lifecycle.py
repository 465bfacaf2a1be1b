"""`{% environment_expiry env %}`: the expiry countdown, warning banner and idle proposal of one
environment; `env|status_words`: its status as every page words it."""

from __future__ import annotations

from django import template

from portal import selectors
from portal.lifecycle import label

register = template.Library()


@register.inclusion_tag("portal/_expiry.html", takes_context=True)
def environment_expiry(context, env) -> dict:
    """Render templates/portal/_expiry.html for `env` (the page's can_act, CSRF token and a
    refused deferral's values pass on)."""
    return {
        **selectors.environment_expiry(environment=env),
        "can_act": context.get("can_act", False),
        "kept": context.get("kept", {}),
        "csrf_token": context.get("csrf_token"),
    }


@register.filter
def status_words(env) -> str:
    """The environment's status in words ("Waiting for approval", "Teardown requested")."""
    return label(env.status, env.status_reason)
