"""Provider registries: apps add functions when they load; one module of kiln calls them all.

The home page's panels (`kiln.dashboard`), the attention items (`kiln.attention`) and the
search results (`kiln.search`) each keep one; the ground floor never imports the apps that
fill them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

P = TypeVar("P")


class Providers(Generic[P]):
    """An ordered set of provider functions, in the order they were first registered."""

    def __init__(self) -> None:
        self._providers: list[P] = []

    def register(self, provider: P) -> P:
        """Add `provider` (idempotent: registering one function twice keeps one); returns it,
        so it serves as a decorator."""
        if provider not in self._providers:
            self._providers.append(provider)
        return provider

    def __iter__(self) -> Iterator[P]:
        return iter(tuple(self._providers))
