"""Live lists: a list page's rows over a websocket, sent again whenever they change.

A list page (environments, rollouts, experiments) renders its rows once and then opens
`/ws/lists/<kind>/?<its own query string>`. The stream renders the same rows for the same
filters, as the viewer may see them now (the app's selectors take the viewer, so the visibility
rule of kiln/identity/visibility.py decides every render), and sends them when they differ from
what it sent last. It renders again as soon as something on the page announces a change (a
change notice, kiln/changes.py, or a message to a Channels group, such as a rollout's
broadcast), and at least every RECHECK_SECONDS, which is how a row new to the page arrives.
`kiln.websocket.AuthorisedStream` admits the caller and closes the socket once they may no
longer listen (4401, 4403).

A subclass says how to render (`render(viewer, query)` -> `Rendered`, in a database thread)
and, for group messages, names a handler that calls `poke()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.http import QueryDict

from kiln import changes
from kiln.identity.permissions import Actor
from kiln.websocket import AuthorisedStream

log = logging.getLogger("kiln.live_lists")

RECHECK_SECONDS = 2.0  # the longest a row new to the page waits to appear
COALESCE_SECONDS = 0.1  # a burst of notices renders once


@dataclass(frozen=True)
class Rendered:
    """One render of a list: its HTML, the change-notice keys and channel groups that announce
    a change to what it shows."""

    html: str
    keys: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)


class _Bridge(threading.Event):
    """A threading.Event (what kiln.changes sets, from its subscriber thread) that also wakes
    an asyncio event on the consumer's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event) -> None:
        super().__init__()
        self._loop, self._wake = loop, wake

    def set(self) -> None:
        super().set()
        with contextlib.suppress(RuntimeError):  # the loop closed with the socket
            self._loop.call_soon_threadsafe(self._wake.set)


class LiveList(AuthorisedStream):
    """A list's rows, rendered for the viewer and sent whenever they change."""

    recheck_seconds = RECHECK_SECONDS

    def render(self, viewer: Actor, query: QueryDict) -> Rendered:
        """The list's rows for this viewer and these filters (run in a database thread)."""
        raise NotImplementedError

    def authorise(self, actor: Actor) -> bool:
        """Anyone with a Kiln role may follow a list: every render shows only what they may see.
        The actor is kept as it is at each re-check, so a lost membership hides its rows."""
        self.viewer = actor
        return True

    def poke(self) -> None:
        """Render again now (something on the page changed)."""
        self._wake.set()

    async def opened(self) -> None:
        """Send the rows, then keep them current."""
        self._wake = asyncio.Event()
        self._bridge = _Bridge(asyncio.get_running_loop(), self._wake)
        self._keys: frozenset[str] = frozenset()
        self._groups: frozenset[str] = frozenset()
        query = QueryDict(self.scope.get("query_string", b"").decode(), mutable=True)
        query.pop("token", None)
        self._query = query
        self._runner = asyncio.ensure_future(self._run())

    async def closed(self) -> None:
        """Stop rendering, stop listening."""
        runner = getattr(self, "_runner", None)
        if runner is not None:
            runner.cancel()
        for key in getattr(self, "_keys", ()):
            changes.unlisten(key, self._bridge)
        for group in getattr(self, "_groups", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    def _render_now(self) -> Rendered:
        return self.render(self.viewer, self._query)

    async def _follow(self, rendered: Rendered) -> None:
        for key in rendered.keys - self._keys:
            changes.listen(key, self._bridge)
        for key in self._keys - rendered.keys:
            changes.unlisten(key, self._bridge)
        for group in rendered.groups - self._groups:
            await self.channel_layer.group_add(group, self.channel_name)
        for group in self._groups - rendered.groups:
            await self.channel_layer.group_discard(group, self.channel_name)
        self._keys, self._groups = rendered.keys, rendered.groups

    async def _run(self) -> None:
        sent: str | None = None
        while True:
            self._wake.clear()
            self._bridge.clear()
            try:
                rendered = await database_sync_to_async(self._render_now)()
            except Exception:  # noqa: BLE001 - the database restarting: try again at the re-check
                log.warning("live list %s not rendered", self.scope.get("path"), exc_info=True)
            else:
                await self._follow(rendered)
                if rendered.html != sent:
                    await self.send_json({"type": "rows", "html": rendered.html})
                    sent = rendered.html
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.recheck_seconds)
            await asyncio.sleep(COALESCE_SECONDS)
