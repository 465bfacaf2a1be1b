"""Reads about witnesses and the tree head: the configured witnesses, what each last cosigned,
the tree's size and root now with the last checkpoint (the explorer, the cosignature intake)."""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Count, Max

from audit.models import Cosignature
from audit.selectors import cosigned_note, latest_tree_checkpoint, tree_root, tree_size
from audit.tree.tlog_verify import ALG_COSIGNATURE, NoteError, parse_verifier_key
from audit.witness.protocol import witness_verifier_key


def witness_keys() -> dict[str, Ed25519PublicKey]:
    """The configured witnesses (KILN_AUDIT_WITNESSES): name -> cosignature public key.

    A configured key that does not parse raises ImproperlyConfigured naming it.
    """
    keys: dict[str, Ed25519PublicKey] = {}
    for text in settings.KILN_AUDIT_WITNESSES.replace(",", " ").split():
        try:
            name, key = parse_verifier_key(text, ALG_COSIGNATURE)
        except NoteError as exc:
            raise ImproperlyConfigured(f"KILN_AUDIT_WITNESSES: {text[:40]!r}: {exc}") from exc
        keys[name] = key
    return keys


def witness_status() -> list[dict[str, Any]]:
    """Each configured witness: its verifier key, last cosigned size and when, and cosignatures."""
    keys = witness_keys()
    rows = (
        Cosignature.objects.filter(witness__in=keys)
        .values("witness")
        .annotate(size=Max("checkpoint__size"), count=Count("id"), last=Max("received_at"))
    )
    seen = {row["witness"]: row for row in rows}
    out = []
    for name, key in sorted(keys.items()):
        row = seen.get(name, {})
        out.append({"name": name, "verifier_key": witness_verifier_key(name, key),
                    "size": row.get("size"), "count": row.get("count", 0),
                    "last": row.get("last")})  # fmt: skip
    return out


def tree_head_key() -> str:
    """What the tree head's card shows, in a word (its size, last checkpoint and the newest
    cosignature), read without building it: the explorer's refresh swaps the card only when
    this changed."""
    checkpoint = latest_tree_checkpoint()
    newest = Cosignature.objects.aggregate(newest=Max("id"))["newest"] or 0
    return f"{tree_size()}:{checkpoint.pk if checkpoint else 0}:{newest}"


def tree_head() -> dict[str, Any]:
    """The tree's size and root now, the last checkpoint with a root and its cosignatures."""
    size = tree_size()
    checkpoint = latest_tree_checkpoint()
    return {
        "size": size,
        "root": base64.b64encode(tree_root(size=size)).decode("ascii") if size else None,
        "checkpoint": checkpoint,
        "note": cosigned_note(checkpoint) if checkpoint else "",
        "cosignatures": list(checkpoint.cosignatures.order_by("witness")) if checkpoint else [],
        "behind": size - checkpoint.size if checkpoint else None,
        "witnesses": [
            {**w, "behind": size - w["size"] if w["size"] else None} for w in witness_status()
        ],  # fmt: skip
    }
