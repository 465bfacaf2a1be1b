"""Identity writes: users seen for the first time in a token, team memberships."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

import audit
from kiln.identity.permissions import system_actor
from portal.models import Membership, Team


def user_from_claims(claims: dict[str, Any]):
    """Return the user for a verified token's `sub`, creating it (and its team membership) on first sight."""
    User = get_user_model()
    username = claims["sub"][:150]
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
                system_actor("identity"), "kiln.membership.created", team, {"user": user.username}
            )
    except IntegrityError:
        pass  # created concurrently; the other request audited it
