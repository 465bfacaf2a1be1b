"""Who acts: the Actor, the four roles and the named system actors of background components.

kiln.identity.permissions (what an actor may do) and kiln.identity.visibility (what it may
see) both stand on this module; it decides nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.identity import components as c

ENGINEER = "engineer"
APPROVER = "approver"
AUDITOR = "auditor"
PLATFORM_ADMIN = "platform-admin"
ROLES = (ENGINEER, APPROVER, AUDITOR, PLATFORM_ADMIN)


@dataclass(frozen=True)
class Actor:
    """Who is acting: a person, an API client or a named system component."""

    username: str
    roles: frozenset[str] = field(default_factory=frozenset)
    teams: frozenset[str] = field(default_factory=frozenset)
    user_id: int | None = None
    kind: str = "user"  # user | system
    capabilities: frozenset[str] = field(default_factory=frozenset)  # system actors only

    def __str__(self) -> str:
        return self.username

    @property
    def is_system(self) -> bool:
        return self.kind == "system"


def system_actor(component: str) -> Actor:
    """The actor of a named background component (`system:reaper`): its job's capabilities only.

    Raises ValueError for a name kiln.identity.components does not list.
    """
    return Actor(
        username=f"system:{component}",
        kind="system",
        capabilities=c.capabilities_of(component),
    )


def has_capability(actor: Actor, capability: str) -> bool:
    """True if the actor is a system component whose job includes `capability`."""
    return actor.is_system and capability in actor.capabilities
