"""Identity tables: teams and who belongs to them.

They were portal's first tables and keep their table names (`portal_team`,
`portal_membership`); kiln/migrations/0001_teams.py moved them here without
touching a row.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kiln.validators import DNS_LABEL


class Team(models.Model):
    """A team owns environments; its slug is a DNS-1123 label used in namespaces and labels."""

    slug = models.CharField(max_length=63, unique=True, validators=[DNS_LABEL])
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "portal_team"
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A person's membership of a team, and where it came from.

    `claim` memberships mirror the identity provider: every authentication with a
    token adds and removes them to match its `team`/`teams` claims. `admin`
    memberships were granted by a platform admin and stay until one removes them;
    a team both grant is one row with source `admin`.
    """

    CLAIM = "claim"
    ADMIN = "admin"
    SOURCES = ((CLAIM, "token claim"), (ADMIN, "granted by a platform admin"))

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    source = models.CharField(max_length=5, choices=SOURCES, default=ADMIN)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "portal_membership"
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="portal_membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}"


__all__ = ["Membership", "Team"]
