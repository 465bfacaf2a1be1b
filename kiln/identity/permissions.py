"""The one module that decides permissions.

DRF permission classes (`kiln.identity.drf`), HTML views, Django admin and
services all ask here. Roles come from the JWT `roles` claim for API clients
and from Django groups for session users; a superuser is a platform admin.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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

    def __str__(self) -> str:
        return self.username

    @property
    def is_system(self) -> bool:
        return self.kind == "system"


def system_actor(component: str) -> Actor:
    """A named actor for background work (never None): `system:reaper`, `system:audit-writer`."""
    return Actor(username=f"system:{component}", roles=frozenset({PLATFORM_ADMIN}), kind="system")


def actor_for_user(user: Any, claims: dict[str, Any] | None = None) -> Actor:
    """Build the Actor for a Django user; `claims` (a verified JWT) override groups for roles."""
    if user is None or not getattr(user, "is_authenticated", False):
        return Actor(username="anonymous")
    teams: set[str] = set()
    if claims is not None:
        # The `team`/`teams` claims count once user_from_claims reconciled them into
        # memberships (the team exists); a claim naming no real team grants nothing.
        roles = {r for r in _as_list(claims.get("roles")) if r in ROLES}
    else:
        roles = {name for name in user.groups.values_list("name", flat=True) if name in ROLES}
        if user.is_superuser:
            roles.add(PLATFORM_ADMIN)
    teams.update(_membership_teams(user))
    return Actor(
        username=user.get_username(),
        roles=frozenset(roles),
        teams=frozenset(teams),
        user_id=user.pk,
    )


def actor_from_request(request: Any) -> Actor:
    """The Actor of an HTTP request (DRF or plain Django)."""
    cached = getattr(request, "_kiln_actor", None)
    if cached is not None:
        return cached
    auth = getattr(request, "auth", None)
    claims = auth if isinstance(auth, dict) else None
    actor = actor_for_user(getattr(request, "user", None), claims)
    try:
        request._kiln_actor = actor
    except AttributeError:  # pragma: no cover - immutable request wrappers
        pass
    return actor


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    return []


def _membership_teams(user: Any) -> Iterable[str]:
    cached = getattr(user, "_kiln_membership_teams", None)
    if cached is not None:  # reconciled with the token's claims moments ago, same request
        return cached
    from portal.models import Membership

    return Membership.objects.filter(user=user).values_list("team__slug", flat=True)


# --- predicates ---------------------------------------------------------------


def has_any_role(actor: Actor) -> bool:
    """True if the actor holds a Kiln role at all; without one only `GET /api/v1/me/` answers."""
    return bool(actor.roles & frozenset(ROLES))


def has_role(actor: Actor, *roles: str) -> bool:
    """True if the actor holds any of `roles`; platform admins hold every role."""
    return PLATFORM_ADMIN in actor.roles or any(r in actor.roles for r in roles)


def is_member(actor: Actor, team_slug: str) -> bool:
    """True if the actor belongs to the team (platform admins belong everywhere)."""
    return PLATFORM_ADMIN in actor.roles or team_slug in actor.teams


def can_view_audit(actor: Actor) -> bool:
    """Auditors (and platform admins) read and export the audit chain."""
    return has_role(actor, AUDITOR)


def can_administer(actor: Actor) -> bool:
    """Platform admins run the platform: admin site, pricing, manual overrides."""
    return PLATFORM_ADMIN in actor.roles


def can_use_admin(actor: Actor, *, is_staff: bool) -> bool:
    """The Django admin: staff accounts that are platform admins or approvers."""
    return is_staff and (PLATFORM_ADMIN in actor.roles or APPROVER in actor.roles)


def can_see_all_teams(actor: Actor) -> bool:
    """Platform admins see every team; everyone else sees the teams they belong to."""
    return PLATFORM_ADMIN in actor.roles


def can_manage_teams(actor: Actor) -> bool:
    """Creating teams and changing who belongs to them is a platform-admin task."""
    return PLATFORM_ADMIN in actor.roles


def can_run_chaos(actor: Actor, team_slug: str) -> bool:
    """Chaos on a namespace: engineers of the team that owns it, or platform admins."""
    if PLATFORM_ADMIN in actor.roles:
        return True
    return ENGINEER in actor.roles and team_slug in actor.teams


def can_view_chaos(actor: Actor, team_slug: str) -> bool:
    """Chaos experiments are visible to the owning team, auditors and platform admins."""
    return PLATFORM_ADMIN in actor.roles or AUDITOR in actor.roles or team_slug in actor.teams


def can_request_environment(actor: Actor, team_slug: str) -> bool:
    """Engineers ask for environments for their own teams (platform admins for any)."""
    return PLATFORM_ADMIN in actor.roles or (ENGINEER in actor.roles and team_slug in actor.teams)


def can_act_on_environment(actor: Actor, team_slug: str) -> bool:
    """Engineers extend and tear down their team's environments (platform admins any)."""
    return can_request_environment(actor, team_slug)


def can_view_environment(actor: Actor, team_slug: str) -> bool:
    """The owning team, approvers, auditors and platform admins see an environment."""
    return (
        team_slug in actor.teams
        or PLATFORM_ADMIN in actor.roles
        or APPROVER in actor.roles
        or AUDITOR in actor.roles
    )


def can_approve(actor: Actor, requester_username: str | None = None) -> bool:
    """Approvers approve, never their own request (separation of duties)."""
    if not has_role(actor, APPROVER) or actor.is_system:
        return False
    return requester_username is None or actor.username != requester_username


def can_manage_rollout(actor: Actor, team_slug: str) -> bool:
    """Engineers of the owning team start, feed and abort its rollouts (platform admins any)."""
    return PLATFORM_ADMIN in actor.roles or (ENGINEER in actor.roles and team_slug in actor.teams)


def can_promote_rollout(actor: Actor) -> bool:
    """A manual promotion overrides the analysis: approvers and platform admins only."""
    return has_role(actor, APPROVER)


def can_view_rollout(actor: Actor, team_slug: str) -> bool:
    """The owning team, approvers, auditors and platform admins see a rollout."""
    return team_slug in actor.teams or bool(
        actor.roles & {PLATFORM_ADMIN, APPROVER, AUDITOR}
    )
