"""The live stream: after a rollout's change commits, broadcast it and schedule its next tick.

Dashboards follow a rollout over a Channels websocket (`canary.consumers`), one group
per rollout. Broadcasts run in `transaction.on_commit`, so a dashboard never shows a
change that rolled back, and a dashboard outage never fails a rollout. The next
analysis tick is enqueued by task name (`ROLLOUT_TICK_TASK`), as `audit.chain.relay` does:
the task module calls these services, so naming the task keeps the import one-way.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from canary.models import Rollout, RolloutTick
from canary.selectors import rollout_stream_update, stream_update_of
from kiln.celery import app

log = logging.getLogger("kiln.canary")

ROLLOUT_TICK_TASK = "canary.tasks.rollout_tick_task"


def group_name(rollout_id: Any) -> str:
    """The channel-layer group of one rollout's dashboard."""
    return f"rollout-{rollout_id}"


def enqueue_tick(rollout_id: Any, tick: int, *, countdown: float | None) -> None:
    """Queue analysis tick `tick` of the rollout (a lost one is enqueued again by the beat sweep)."""
    try:
        app.send_task(ROLLOUT_TICK_TASK, args=(str(rollout_id), tick), countdown=countdown or 0)
    except Exception:  # noqa: BLE001 - the beat sweep enqueues it again; say so
        log.exception("could not enqueue tick %s of rollout %s", tick, rollout_id)


def after_commit(
    rollout: Rollout, *, countdown: float | None, last_tick: RolloutTick | None = None
) -> None:
    """After commit: broadcast the new state and, if still active, schedule the next tick.

    The message is built inside the transaction from the rows in hand (what commits is
    what the dashboard sees), so the broadcast reads nothing back after the commit.
    """
    rollout_id, active, next_tick = rollout.pk, rollout.is_active, rollout.ticks_done + 1
    payload = _stream_payload(rollout, last_tick)

    def run() -> None:
        broadcast(rollout_id, payload)
        if active and countdown is not None:
            enqueue_tick(rollout_id, next_tick, countdown=countdown)

    transaction.on_commit(run)


def _stream_payload(rollout: Rollout, last_tick: RolloutTick | None) -> dict[str, Any] | None:
    if get_channel_layer() is None:
        return None
    if last_tick is None and rollout.ticks_done:
        # A rollout that has analysed no tick has no tick row to show (ticks_done is 0).
        last_tick = rollout.ticks.order_by("-number").first()
    return stream_update_of(rollout, last_tick)


def broadcast(rollout_id: Any, payload: dict[str, Any] | None = None) -> None:
    """Send the rollout's latest state (read now unless given) to its websocket group."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if payload is None:
            payload = rollout_stream_update(rollout_id)
        message = {"type": "rollout.event", "payload": payload}
        if isinstance(layer, InMemoryChannelLayer):
            async_to_sync(layer.group_send)(group_name(rollout_id), message)
        else:
            # One long-lived loop: the Redis layer keeps its connection pool per event loop,
            # so a fresh loop per broadcast would open a fresh connection every tick.
            future = asyncio.run_coroutine_threadsafe(
                layer.group_send(group_name(rollout_id), message), _broadcast_loop()
            )
            future.result(timeout=5)
    except Exception:  # noqa: BLE001 - a dashboard outage must not fail the rollout; say so
        log.exception("broadcast for rollout %s failed", rollout_id)


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _broadcast_loop() -> asyncio.AbstractEventLoop:
    """The process's broadcast event loop, running in a daemon thread (started on first use)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="canary-broadcast", daemon=True).start()
        return _loop
