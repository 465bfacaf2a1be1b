"""A team's own settings and messages: its sleep schedule, its webhook and what is posted to it."""

from __future__ import annotations

from django.db import models

from kiln.identity.models import Team
from portal.models.environments import Environment


class SleepSchedule(models.Model):
    """When a team's environments sleep: waking windows (and sleep windows, which win) in an IANA
    time zone; outside every waking window they sleep (portal/sleep_schedule.py reads it)."""

    AWAKE = "awake"
    ASLEEP = "asleep"

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="sleep_schedule")
    time_zone = models.CharField(max_length=64)
    wake_windows = models.JSONField(default=list)  # [{"days": ["mon", ...], "start", "end"}]
    sleep_windows = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    # What the schedule last wanted, so a pass acts on a change only (a person's own wake or
    # sleep in between stands until the next change).
    last_state = models.CharField(max_length=10, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.team.slug} sleeps by {self.time_zone}"


class TeamWebhook(models.Model):
    """Where a team's chat notifications (expiry warnings, idle proposals) are posted."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="webhook")
    url = models.URLField(max_length=500, help_text="http(s) URL that accepts a JSON POST")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.team.slug} -> {self.url}"


class Notification(models.Model):
    """One message to a team's webhook, posted by a Celery task with retries."""

    PENDING, SENT, FAILED = "pending", "sent", "failed"  # its statuses

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="notifications")
    # None for a message about the team as a whole (a budget threshold crossed).
    environment = models.ForeignKey(
        Environment, on_delete=models.CASCADE, related_name="notifications", null=True, blank=True
    )
    kind = models.CharField(max_length=40)  # expiry_warning | idle_proposed | budget_warning | ...
    url = models.URLField(max_length=500)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=10, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} to {self.team.slug} [{self.status}]"
