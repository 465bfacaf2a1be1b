"""Rollouts: the INCONCLUSIVE status, the analysis state a person steers, observation times."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("canary", "0002_rollouts")]

    operations = [
        migrations.AlterField(
            model_name="rollout",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("running", "Running"),
                    ("inconclusive", "Inconclusive"),
                    ("promoted", "Promoted"),
                    ("rolled_back", "Rolled back"),
                    ("aborted", "Aborted"),
                    ("failed", "Failed"),
                ],
                default="pending",
                max_length=20,
            ),
        ),
        migrations.AddField(
            model_name="rollout",
            name="analysis",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="rollout",
            name="analysis_start",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="rollout",
            name="extra_ticks",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="observation",
            name="observed_at",
            field=models.DateTimeField(blank=True, help_text="End of the window", null=True),
        ),
    ]
