"""The header's search: environments, rollouts, experiments and nodes by name or id, among
what the viewer may see, and for auditors links into the audit chain's explorer.

kiln imports no app, so each app registers a provider (in its AppConfig.ready, as the home
page's panels do): it takes the viewer and the query and returns its `Hit`s, read through its
own selectors with `viewer=`, so the search shows nothing its pages would not. The audit
chain is searched through its explorer's own filters (links an auditor follows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from django.urls import NoReverseMatch, reverse

from kiln.errors import InvalidInput
from kiln.identity.permissions import Actor, can_view_audit
from kiln.providers import Providers

QUERY_MIN, QUERY_MAX = 2, 100
PER_KIND = 8


@dataclass(frozen=True)
class Hit:
    """One search result: its kind, what to show and where it leads."""

    kind: str
    title: str
    detail: str
    url: str


Provider = Callable[[Actor, str], list[Hit]]
_PROVIDERS: Providers[Provider] = Providers()


def register(provider: Provider) -> Provider:
    """Add a search provider (idempotent); usable as a decorator."""
    return _PROVIDERS.register(provider)


def clean_query(raw: str | None) -> str:
    """The query stripped; InvalidInput (400) unless it has 2 to 100 characters."""
    query = " ".join((raw or "").split())
    if not QUERY_MIN <= len(query) <= QUERY_MAX:
        raise InvalidInput(
            f"Type {QUERY_MIN} to {QUERY_MAX} characters: a name, part of one, or an id.",
            extra={"fields": {"q": [f"between {QUERY_MIN} and {QUERY_MAX} characters"]}},
        )
    return query


def audit_links(actor: Actor, query: str) -> list[Hit]:
    """Links into the audit explorer for auditors: the entry by seq, events by target and action.

    Not results: each opens the explorer's filter for the query, which may find nothing, so a
    page lists them apart from the hits and does not count them."""
    if not can_view_audit(actor):
        return []
    try:
        explorer = reverse("audit:explorer")
    except NoReverseMatch:
        return []
    hits = []
    if query.isdigit() and len(query) < 19:
        hits.append(
            Hit("audit event", f"Audit event #{query}", "the chain entry with this sequence number",
                reverse("audit:event-detail", args=[int(query)]))
        )  # fmt: skip
    if " " not in query:
        hits.append(
            Hit("audit event", f"Events on {query}", "audit events whose target is exactly this",
                f"{explorer}?{urlencode({'target': query})}")
        )  # fmt: skip
        if "." in query:
            hits.append(
                Hit("audit event", f"Events {query}", "audit events with this action",
                    f"{explorer}?{urlencode({'action': query})}")
            )  # fmt: skip
    return hits


def search(actor: Actor, raw: str | None) -> list[Hit]:
    """Every provider's hits for the query (at most PER_KIND each); `audit_links` are apart."""
    query = clean_query(raw)
    hits: list[Hit] = []
    for provider in _PROVIDERS:
        hits.extend(provider(actor, query)[:PER_KIND])
    return hits
