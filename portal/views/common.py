"""Helpers the portal pages share: the statuses that change on their own, the visible environment or 404."""

from __future__ import annotations

from django.http import Http404, HttpRequest

from kiln.errors import NotFound
from kiln.identity.permissions import (
    actor_from_request,
)
from portal import selectors
from portal.lifecycle import Status

ACTIVE = {
    Status.APPROVED,
    Status.PROVISIONING,
    Status.EXPIRING,
    Status.TEARING_DOWN,
    Status.WAKING,
}


def env_or_404(request: HttpRequest, public_id: str):
    """The environment the viewer may see, or a 404 (missing and hidden answer alike)."""
    try:
        return selectors.environment_get(viewer=actor_from_request(request), public_id=public_id)
    except NotFound as exc:
        raise Http404("no such environment") from exc
