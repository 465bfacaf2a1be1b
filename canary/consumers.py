"""The rollout dashboard's websocket: a snapshot on connect, then every update the services broadcast."""

from __future__ import annotations

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from canary import selectors
from canary.services import group_name
from kiln.errors import NotFound
from kiln.identity.authentication import verify_bearer
from kiln.identity.permissions import actor_for_user, has_any_role
from kiln.identity.services import user_from_claims
from kiln.identity.tokens import TokenRejected


class RolloutConsumer(AsyncJsonWebsocketConsumer):
    """`/ws/rollouts/<id>/`: session user or `?token=` bearer; a hidden rollout closes like a missing one."""

    async def connect(self) -> None:
        self.rollout_id = self.scope["url_route"]["kwargs"]["rollout_id"]
        snapshot = await self._authorised_snapshot()
        if snapshot is None:
            await self.close(code=4403)
            return
        self.group = group_name(self.rollout_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json(snapshot)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def rollout_event(self, event: dict) -> None:
        await self.send_json(event["payload"])

    @database_sync_to_async
    def _authorised_snapshot(self) -> dict | None:
        actor = self._actor()
        if actor is None or not has_any_role(actor):  # a role-less caller sees no stream
            return None
        try:
            rollout = selectors.rollout_get(viewer=actor, rollout_id=self.rollout_id)
        except NotFound:
            return None
        series = selectors.rollout_series(rollout)
        return {"type": "snapshot", **series}

    def _actor(self):
        token = (parse_qs(self.scope.get("query_string", b"").decode()).get("token") or [None])[0]
        if token:
            try:
                claims = verify_bearer(token)
            except TokenRejected:
                return None
            user = user_from_claims(claims=claims)
            return actor_for_user(user, claims) if user.is_active else None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return None
        return actor_for_user(user)
