"""The audit spine: `record()` an event beside the change it describes.

from audit import record
record(actor, "portal.environment.approved", env, {"reason": "..."})
"""

from __future__ import annotations

from typing import Any


def record(actor: Any, action: str, target: Any, data: dict[str, Any] | None = None):
    """Write an audit event to the outbox in the caller's transaction; see `audit.services.record`."""
    # Imported here, not at the top: Django imports this package while it loads the apps,
    # before models may be imported, and audit.services imports the models.
    from audit.services import record as _record

    return _record(actor, action, target, data)


__all__ = ["record"]
