"""What needs a person: the home page's attention list and the in-page notifications.

kiln imports no app, so each app registers a provider (in its AppConfig.ready, as the home
page's panels do, `kiln.dashboard`): it takes the viewer and returns the `Item`s that wait
for them. An item's `key` names the thing *and its state* ("portal.expiring:<id>:<expiry>"),
so dismissing it hides that state only: extended and expiring again, it comes back.
Dismissals are per person (`kiln.attention.models.AttentionDismissal`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime

from kiln.identity.permissions import Actor
from kiln.providers import Providers

KEY_MAX = 200


@dataclass(frozen=True)
class Item:
    """One thing waiting for the viewer: what, why, where to act on it."""

    key: str
    kind: str  # approval | expiring | idle | inconclusive | experiment
    title: str
    detail: str
    url: str
    at: datetime | None = None

    def as_dict(self) -> dict[str, str]:
        """The item as the notifications feed sends it: every field but `at`."""
        return {name: value for name, value in asdict(self).items() if name != "at"}


Provider = Callable[[Actor], list[Item]]
_PROVIDERS: Providers[Provider] = Providers()


def register(provider: Provider) -> Provider:
    """Add an attention provider (idempotent); usable as a decorator."""
    return _PROVIDERS.register(provider)


def collect(actor: Actor) -> list[Item]:
    """Every item every provider has for this person, newest first, each key once."""
    seen: dict[str, Item] = {}
    for provider in _PROVIDERS:
        for item in provider(actor):
            seen.setdefault(item.key[:KEY_MAX], item)
    return sorted(seen.values(), key=lambda i: (i.at is None, -(i.at.timestamp() if i.at else 0)))
