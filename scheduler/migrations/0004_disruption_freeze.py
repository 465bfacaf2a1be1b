# Disruption freezes: the nodes Kiln keeps out of Karpenter's voluntary disruption.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0003_pools_and_spread")]

    operations = [
        migrations.CreateModel(
            name="DisruptionFreeze",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("node", models.CharField(db_index=True, max_length=253)),
                (
                    "holder_kind",
                    models.CharField(
                        choices=[("rollout", "Rollout"), ("experiment", "Chaos experiment")],
                        max_length=16,
                    ),
                ),
                ("holder_id", models.CharField(max_length=64)),
                ("holder_label", models.CharField(blank=True, default="", max_length=200)),
                ("team", models.CharField(blank=True, default="", max_length=63)),
                ("since", models.DateTimeField()),
                ("bound_at", models.DateTimeField()),
                ("renewed_at", models.DateTimeField()),
                ("lease_seconds", models.FloatField()),
                ("applied_at", models.DateTimeField(blank=True, null=True)),
                ("released_at", models.DateTimeField(blank=True, null=True)),
                ("release_reason", models.CharField(blank=True, default="", max_length=200)),
                ("lifted_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={"ordering": ["-since", "node"]},
        ),
        migrations.AddConstraint(
            model_name="disruptionfreeze",
            constraint=models.UniqueConstraint(
                condition=models.Q(released_at__isnull=True),
                fields=("node", "holder_kind", "holder_id"),
                name="disruptionfreeze_one_open_per_node_holder",
            ),
        ),
        migrations.AddConstraint(
            model_name="disruptionfreeze",
            constraint=models.CheckConstraint(
                condition=models.Q(bound_at__gte=models.F("since")),
                name="disruptionfreeze_bound_after_since",
            ),
        ),
        migrations.AddConstraint(
            model_name="disruptionfreeze",
            constraint=models.CheckConstraint(
                condition=models.Q(lease_seconds__gt=0), name="disruptionfreeze_lease_positive"
            ),
        ),
        migrations.AddIndex(
            model_name="disruptionfreeze",
            index=models.Index(fields=["holder_kind", "holder_id"], name="disruptionfreeze_holder"),
        ),
        migrations.AddIndex(
            model_name="disruptionfreeze",
            index=models.Index(
                condition=models.Q(lifted_at__isnull=True),
                fields=["node"],
                name="disruptionfreeze_unlifted",
            ),
        ),
    ]
