"""The environment list's websocket (`/ws/lists/environments/`): the rows the page shows, for
its filters, sent again whenever an environment on it changes status (kiln/live_lists.py)."""

from __future__ import annotations

from django.http import QueryDict
from django.template.loader import render_to_string

from kiln.identity.permissions import Actor
from kiln.live_lists import LiveList, Rendered
from portal.selectors import change_key
from portal.views.requests import environment_list_context


class EnvironmentListStream(LiveList):
    """Every environment the viewer may see, as the list page filters them."""

    def render(self, viewer: Actor, query: QueryDict) -> Rendered:
        """The page's rows, and a change notice per environment on it (a transition announces
        itself when it commits)."""
        context = environment_list_context(viewer=viewer, query=query)
        return Rendered(
            html=render_to_string("portal/_list_rows.html", context),
            keys=frozenset(change_key(row["env"]) for row in context["rows"]),
        )
