"""Reads of the attention list: what waits for a person, less what they dismissed."""

from __future__ import annotations

from kiln.attention import Item, collect
from kiln.attention.models import AttentionDismissal
from kiln.identity.permissions import Actor


def attention_list(*, viewer: Actor) -> list[Item]:
    """The items waiting for the viewer that they have not dismissed, newest first."""
    items = collect(viewer)
    if not items:
        return []
    dismissed = set(
        AttentionDismissal.objects.filter(
            username=viewer.username, key__in=[i.key for i in items]
        ).values_list("key", flat=True)
    )
    return [i for i in items if i.key not in dismissed]
