"""The audit chain's items on the attention list (`kiln.attention`): for auditors and platform
admins, a failed or overdue verification, entries no checkpoint signs, a witness not cosigning."""

from __future__ import annotations

from django.urls import reverse

from audit.home.chain_state import chain_concerns
from kiln.attention import Item, register
from kiln.identity.permissions import Actor, can_view_audit


@register
def chain_needs_auditor(actor: Actor) -> list[Item]:
    """What about the chain needs the viewer, if they read the audit chain."""
    if not can_view_audit(actor) or actor.is_system:
        return []
    url = reverse("audit:explorer")
    return [
        Item(key=c.key, kind="audit", title=c.title, detail=c.detail, url=url, at=c.since)
        for c in chain_concerns()
    ]
