"""Standalone's chaos controllers: they run in the in-process worker's threads.

Stopping Kiln stops them first (each reverts its fault and gives its lease up) instead of waiting
for their experiments to end; starting Kiln queues a controller for every experiment still
running, which takes its lease and injects again. Registered with `kiln.standalone.add_service`.
"""

from __future__ import annotations

import logging

from canary.chaos import controller
from canary.chaos.services import controllers_resume
from kiln.standalone import Service

log = logging.getLogger("kiln.chaos")


def controllers_service() -> Service:
    """The chaos controllers as one of standalone's in-process services (imported from the
    app's ready(), once the models are)."""

    def start() -> None:
        controller.allow_controllers()
        controllers_resume()

    def stop() -> None:
        if not controller.stop_every_controller():
            log.warning(
                "a chaos controller had not stopped after 10 s; the reaper reverts its fault"
            )

    return Service("chaos controllers", start, stop)
