"""Identity reads: teams visible to an actor, a team by slug."""

from __future__ import annotations

from django.db.models import QuerySet

from kiln.errors import NotFound
from kiln.identity import visibility
from kiln.identity.models import Team
from kiln.identity.permissions import Actor


def team_list(*, viewer: Actor) -> QuerySet[Team]:
    """Teams (and their members) the viewer may see (kiln.identity.visibility.TEAMS)."""
    teams = Team.objects.prefetch_related("memberships__user").order_by("slug")
    return visibility.restrict(teams, viewer, visibility.TEAMS, team_field="slug")


def team_get(*, viewer: Actor, slug: str) -> Team:
    """One team the viewer may see; an invisible team is the same 404 as a missing one."""
    team = team_list(viewer=viewer).filter(slug=slug).first()
    if team is None:
        raise NotFound(f"No team {slug!r}.")
    return team


def team_member_usernames(*, team: Team) -> list[str]:
    """User names of a team's members, sorted."""
    return sorted(m.user.get_username() for m in team.memberships.all())
