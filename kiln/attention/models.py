"""A person's dismissal of one attention item (by its key, which names the item's state)."""

from __future__ import annotations

from django.db import models


class AttentionDismissal(models.Model):
    """`username` dismissed the attention item `key` at `dismissed_at`; it stays hidden for them."""

    username = models.CharField(max_length=150)
    key = models.CharField(max_length=200)
    dismissed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "kiln"
        constraints = [
            models.UniqueConstraint(fields=["username", "key"], name="kiln_attention_once")
        ]

    def __str__(self) -> str:
        return f"{self.username} dismissed {self.key}"
