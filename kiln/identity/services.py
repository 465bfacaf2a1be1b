"""Identity writes: users seen for the first time in a token, teams and their members.

Every write is audited in the same transaction as the change it describes.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

import audit
from kiln.errors import Conflict, InvalidInput
from kiln.identity.permissions import Actor, system_actor
from portal.models import DNS_LABEL, Membership, Team

MAX_USERNAME = 150


def user_from_claims(claims: dict[str, Any]):
    """Return the user for a verified token's `sub`, creating it (and its team membership) on first sight."""
    User = get_user_model()
    username = claims["sub"]
    if len(username) > MAX_USERNAME:  # the verifier refuses these; never truncate into another user
        raise InvalidInput(f"sub is longer than {MAX_USERNAME} characters")
    user = User.objects.filter(username=username).first()
    if user is None:
        try:
            with transaction.atomic():
                user = User.objects.create(username=username)
                user.set_unusable_password()
                user.save(update_fields=["password"])
                audit.record(
                    system_actor("identity"),
                    "kiln.user.created",
                    user,
                    {"sub": claims["sub"], "iss": claims.get("iss"), "via": "jwt"},
                )
        except IntegrityError:  # a concurrent first request created it
            user = User.objects.get(username=username)
    team_slug = claims.get("team")
    if isinstance(team_slug, str) and team_slug:
        membership_ensure(user=user, team_slug=team_slug)
    return user


def membership_ensure(*, user, team_slug: str) -> None:
    """Make `user` a member of an existing team (idempotent). Unknown teams are ignored."""
    team = Team.objects.filter(slug=team_slug).first()
    if team is None or Membership.objects.filter(user=user, team=team).exists():
        return
    try:
        with transaction.atomic():
            Membership.objects.create(user=user, team=team)
            audit.record(
                system_actor("identity"),
                "kiln.membership.created",
                team,
                {"user": user.username, "team": team.slug, "via": "jwt"},
            )
    except IntegrityError:
        pass  # created concurrently; the other request audited it


def team_create(*, actor: Actor, slug: str, name: str) -> Team:
    """Create a team whose slug is a DNS-1123 label; 400 on a bad slug, 409 if it exists."""
    slug, name = slug.strip(), name.strip()
    try:
        DNS_LABEL(slug)
    except ValidationError as exc:
        raise InvalidInput(
            "The team slug is not a DNS-1123 label.", extra={"fields": {"slug": exc.messages}}
        ) from exc
    if not name:
        raise InvalidInput("The team needs a name.", extra={"fields": {"name": ["required"]}})
    if len(name) > Team._meta.get_field("name").max_length:
        raise InvalidInput("The team name is too long.", extra={"fields": {"name": ["too long"]}})
    try:
        with transaction.atomic():
            team = Team.objects.create(slug=slug, name=name)
            audit.record(actor, "kiln.team.created", team, {"slug": slug, "name": name})
    except IntegrityError as exc:
        raise Conflict(f"A team with slug {slug!r} already exists.") from exc
    return team


def membership_add(*, actor: Actor, team: Team, username: str) -> Membership:
    """Add an existing user to `team`; 400 if the user is unknown, 409 if already a member."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise InvalidInput(
            f"No user named {username!r}.", extra={"fields": {"username": ["unknown user"]}}
        )
    try:
        with transaction.atomic():
            membership = Membership.objects.create(user=user, team=team)
            audit.record(
                actor,
                "kiln.membership.created",
                team,
                {"user": user.username, "team": team.slug},
            )
    except IntegrityError as exc:
        raise Conflict(f"{username} is already a member of {team.slug}.") from exc
    return membership


def membership_remove(*, actor: Actor, membership: Membership) -> None:
    """Remove a person from a team."""
    with transaction.atomic():
        team, username = membership.team, membership.user.get_username()
        membership.delete()
        audit.record(actor, "kiln.membership.deleted", team, {"user": username, "team": team.slug})
