"""Standalone's chaos controllers: they run in the in-process worker's threads.

Stopping Kiln stops them first (each reverts its fault and gives its lease up) instead of waiting
for their experiments to end; starting Kiln queues a controller for every experiment still
running, which takes its lease and injects again. Registered with `kiln.standalone.add_service`.
"""

from __future__ import annotations

from canary.chaos import controller
from canary.chaos.services import controllers_resume
from kiln.standalone import Service


def controllers_service() -> Service:
    """The chaos controllers as one of standalone's in-process services (imported from the
    app's ready(), once the models are)."""

    def start() -> None:
        controller.allow_controllers()
        controllers_resume()

    return Service("chaos controllers", start, controller.stop_every_controller)
