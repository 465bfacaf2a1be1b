"""Portal tables: teams and who belongs to them."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

DNS_LABEL = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters.",
)


class Team(models.Model):
    """A team owns environments; its slug is a DNS-1123 label used in namespaces and labels."""

    slug = models.CharField(max_length=63, unique=True, validators=[DNS_LABEL])
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A person's membership of a team."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="portal_membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}"
