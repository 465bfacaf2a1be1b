# Safety levers; overlap and idempotency fields on experiments; stop-condition evidence.
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("chaos", "0001_initial"), ("kiln", "0001_teams")]

    operations = [
        migrations.AddField(
            model_name="chaosexperiment",
            name="continue_without_metrics",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="chaosexperiment",
            name="may_overlap",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="chaosexperiment",
            name="idempotency_key",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="chaosexperiment",
            name="body_sha256",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="chaosexperiment",
            name="end_evidence",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddConstraint(
            model_name="chaosexperiment",
            constraint=models.UniqueConstraint(
                condition=models.Q(("idempotency_key", ""), _negated=True),
                fields=("created_by_name", "idempotency_key"),
                name="chaos_exp_idempotency_key",
            ),
        ),
        migrations.CreateModel(
            name="ChaosLever",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("scope", models.CharField(choices=[("platform", "Platform"), ("team", "Team")], max_length=16)),
                ("engaged", models.BooleanField(default=False)),
                ("engaged_by", models.CharField(blank=True, default="", max_length=200)),
                ("engaged_reason", models.CharField(blank=True, default="", max_length=300)),
                ("engaged_at", models.DateTimeField(blank=True, null=True)),
                ("released_by", models.CharField(blank=True, default="", max_length=200)),
                ("released_reason", models.CharField(blank=True, default="", max_length=300)),
                ("released_at", models.DateTimeField(blank=True, null=True)),
                (
                    "team",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="chaos_levers",
                        to="kiln.team",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("scope", "platform"), ("team__isnull", True)),
                            models.Q(("scope", "team"), ("team__isnull", False)),
                            _connector="OR",
                        ),
                        name="chaos_lever_scope_team",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("scope", "platform")),
                        fields=("scope",),
                        name="chaos_lever_one_platform",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("scope", "team")),
                        fields=("team",),
                        name="chaos_lever_one_per_team",
                    ),
                ],
            },
        ),
    ]
