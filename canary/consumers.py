"""The rollout dashboard's websocket: a snapshot on connect, then every update the services
broadcast, for as long as the caller may still see the rollout (kiln.websocket re-checks)."""

from __future__ import annotations

from channels.db import database_sync_to_async

from canary import selectors
from canary.services import group_name
from kiln.errors import NotFound
from kiln.identity.permissions import Actor
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
