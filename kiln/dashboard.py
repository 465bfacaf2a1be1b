"""The home page's panels. kiln imports no app, so each app registers what it shows there
(in its AppConfig.ready): a provider takes the viewer and returns a Panel, or None to show nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kiln.identity.permissions import Actor
from kiln.providers import Providers


@dataclass(frozen=True)
class Panel:
    """One card on the home page: a template and its context, placed by `order`."""

    template: str
    context: dict[str, Any] = field(default_factory=dict)
    order: int = 100


Provider = Callable[[Actor], Panel | None]
_PROVIDERS: Providers[Provider] = Providers()


def register(provider: Provider) -> Provider:
    """Add a panel provider (idempotent); usable as a decorator."""
    return _PROVIDERS.register(provider)


def panels(actor: Actor) -> list[Panel]:
    """The panels this person sees, in order."""
    found = [panel for provider in _PROVIDERS if (panel := provider(actor)) is not None]
    return sorted(found, key=lambda p: p.order)
