"""Sleeping and waking: the environment's sleep fields and the teams' sleep schedules."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kiln", "0001_teams"),
        ("portal", "0010_environment_previous_version_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="environment",
            name="sleep_trigger",
            field=models.CharField(blank=True, default="", max_length=20),
        ),
        migrations.AddField(
            model_name="environment",
            name="slept_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="environment",
            name="sleep_memory",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="environment",
            name="wake_requested_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="environment",
            name="woke_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="environment",
            name="last_wake_seconds",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="SleepSchedule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("time_zone", models.CharField(max_length=64)),
                ("wake_windows", models.JSONField(default=list)),
                ("sleep_windows", models.JSONField(blank=True, default=list)),
                ("enabled", models.BooleanField(default=True)),
                ("last_state", models.CharField(blank=True, default="", max_length=10)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "team",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="sleep_schedule",
                        to="kiln.team",
                    ),
                ),
            ],
        ),
    ]
