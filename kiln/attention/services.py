"""Writes of the attention list: a person dismisses an item waiting for them (audited)."""

from __future__ import annotations

from django.db import transaction

import audit
from kiln.attention import KEY_MAX, collect
from kiln.attention.models import AttentionDismissal
from kiln.errors import InvalidInput, NotFound
from kiln.identity.permissions import Actor


def attention_dismiss(*, actor: Actor, key: str) -> AttentionDismissal:
    """Hide the item `key` from the actor's list; 404 unless it waits for them (idempotent)."""
    key = (key or "").strip()
    if not key or len(key) > KEY_MAX:
        raise InvalidInput(
            "Say which item to dismiss.", extra={"fields": {"key": ["an item's key is required"]}}
        )
    item = next((i for i in collect(actor) if i.key == key), None)
    if item is None:  # not one of theirs, or no longer waiting: the same answer
        raise NotFound("Nothing with that key waits for you.")
    with transaction.atomic():
        dismissal, created = AttentionDismissal.objects.get_or_create(
            username=actor.username, key=key
        )
        if created:
            audit.record(
                actor,
                "kiln.attention.dismissed",
                f"attention:{key}",
                {"key": key, "kind": item.kind, "title": item.title},
            )
    return dismissal
