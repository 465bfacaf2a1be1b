"""The audit chain's home-page card (`kiln.dashboard`): its size, last checkpoint, last witness
cosignature and last verification, with Verify now, for those who read the chain."""

from __future__ import annotations

from audit.home.chain_state import chain_card
from kiln.dashboard import Panel, register
from kiln.identity.permissions import Actor, can_view_audit


@register
def audit_chain(actor: Actor) -> Panel | None:
    """Auditors' and platform admins' card of the chain's state."""
    if not can_view_audit(actor) or actor.is_system:
        return None
    return Panel("audit/_dashboard_chain.html", {"chain": chain_card()}, order=5)
