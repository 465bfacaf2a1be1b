"""kombu's Redis transport with one repair: a worker survives its broker going away.

When a worker's connection to Redis breaks while it waits in BRPOP, celery's consumer
(`Consumer.on_connection_error_after_connected`) has kombu collect the connection: the first
close of the consumer's channel fails reading the broken BRPOP reply and leaves the channel
open, and the collect then drops the transport's client. Celery then closes the connection once
more; the channel's close now tries to put back the messages it still holds (kombu's
`restore_unacked`), needs a new connection pool, and builds it from the dropped client:
`AttributeError: 'NoneType' object has no attribute 'hostname'`. That is no connection error,
so celery calls it unrecoverable and the worker exits: a restart of Redis under an idle worker
holding a countdown message killed it (tests/kiln/test_task_recovery.py).

Here that restore does nothing once the transport has no client: nothing can reach Redis then
anyway, and the messages stay where they are, in kombu's `unacked` hash, recorded against the
worker's incarnation; the worker reconnects as a new incarnation and the sweeps put them back
(kiln/task_recovery.py). Selected by CELERY_BROKER_TRANSPORT for a redis:// broker.
"""

from __future__ import annotations

import logging

from kombu.transport import redis

log = logging.getLogger("kiln.celery.recovery")


class QoS(redis.QoS):
    """Redis ack emulation that does not restore through a connection already torn down."""

    def restore_unacked(self, client=None) -> None:
        transport = self.channel.connection
        if client is None and (transport is None or transport.client is None):
            if self._delivered:
                log.warning(
                    "broker connection gone: %d unacknowledged message(s) stay in the unacked "
                    "hash until the task recovery sweep puts them back", len(self._delivered),
                )  # fmt: skip
            self._delivered.clear()
            return
        super().restore_unacked(client)


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
