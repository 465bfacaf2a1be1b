"""The audit spine: `record()` an event beside the change it describes.

from audit import record
record(actor, "portal.environment.approved", env, {"reason": "..."})
"""

from __future__ import annotations

from typing import Any


def record(actor: Any, action: str, target: Any, data: dict[str, Any] | None = None):
    """Write an audit event to the outbox in the caller's transaction; see `audit.services.record`."""
    from audit.services import record as _record

    return _record(actor, action, target, data)


__all__ = ["record"]
