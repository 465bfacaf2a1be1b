"""Attention dismissals: which person hid which item of their attention list."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kiln", "0001_teams"),
    ]

    operations = [
        migrations.CreateModel(
            name="AttentionDismissal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("username", models.CharField(max_length=150)),
                ("key", models.CharField(max_length=200)),
                ("dismissed_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("username", "key"), name="kiln_attention_once")
                ],
            },
        ),
    ]
