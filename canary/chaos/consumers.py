"""The experiment list's websocket (`/ws/lists/experiments/`): the rows the page shows, for its
status filter, sent again whenever one changes (its status, its lease's holder and renewals).

A lease renews every few seconds and announces nothing, so the list renders again every
second (kiln/live_lists.py sends only what changed)."""

from __future__ import annotations

from django.http import QueryDict
from django.template.loader import render_to_string

from canary.chaos.views import experiment_list_context
from kiln.identity.permissions import Actor
from kiln.live_lists import LiveList, Rendered


class ExperimentListStream(LiveList):
    """Every experiment the viewer may see, as the list page filters them."""

    recheck_seconds = 1.0

    def render(self, viewer: Actor, query: QueryDict) -> Rendered:
        """The page's rows."""
        context = experiment_list_context(viewer=viewer, query=query)
        return Rendered(html=render_to_string("chaos/_list_rows.html", context))
