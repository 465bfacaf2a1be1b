"""The rollout dashboard's websocket: a snapshot on connect, then every update the services
broadcast, for as long as the caller may still see the rollout (kiln.websocket re-checks);
and the rollout list's, which renders the page's rows again on every broadcast of a rollout
on it (kiln/live_lists.py)."""

from __future__ import annotations

from channels.db import database_sync_to_async
from django.http import QueryDict
from django.template.loader import render_to_string

from canary import selectors
from canary.services import group_name
from canary.views import rollout_list_context
from kiln.errors import NotFound
from kiln.identity.permissions import Actor
from kiln.live_lists import LiveList, Rendered
from kiln.websocket import AuthorisedStream


class RolloutConsumer(AuthorisedStream):
    """`/ws/rollouts/<id>/`: session user or `?token=` bearer; a hidden rollout closes like a
    missing one, and one hidden later (the caller left the team) closes the stream."""

    def authorise(self, actor: Actor) -> bool:
        """The caller may follow the rollout while it may see it."""
        try:
            self.rollout = selectors.rollout_get(viewer=actor, rollout_id=self._rollout_id())
        except NotFound:
            return False
        return True

    async def opened(self) -> None:
        """Join the rollout's group, then send the snapshot (an update in between is harmless)."""
        self.group = group_name(self._rollout_id())
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send_json(await self._snapshot())

    async def closed(self) -> None:
        """Leave the rollout's group."""
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def rollout_event(self, event: dict) -> None:
        """Forward one broadcast update."""
        await self.send_json(event["payload"])

    def _rollout_id(self) -> str:
        return self.scope["url_route"]["kwargs"]["rollout_id"]

    @database_sync_to_async
    def _snapshot(self) -> dict:
        self.rollout.refresh_from_db()  # as it is now the group is joined
        return {"type": "snapshot", **selectors.rollout_series(self.rollout)}


class RolloutListStream(LiveList):
    """`/ws/lists/rollouts/`: the rollouts the viewer may see, as the list page filters them;
    each rollout's broadcast (a tick, a decision, a status) renders the rows again."""

    def render(self, viewer: Actor, query: QueryDict) -> Rendered:
        """The page's rows, and the dashboard group of each rollout on it."""
        context = rollout_list_context(viewer=viewer, query=query)
        return Rendered(
            html=render_to_string("canary/rollouts/_list_rows.html", context),
            groups=frozenset(group_name(r.pk) for r in context["rollouts"]),
        )

    async def rollout_event(self, event: dict) -> None:
        """A rollout on the page changed: render again."""
        self.poke()
