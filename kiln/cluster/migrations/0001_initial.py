"""The simulated cluster's models, taken over from `portal` with their tables and rows.

State only: the tables `portal_simulatedobject` and `portal_simulatedfailure` were
created by portal's migration 0002 and stay as they are (names, constraints,
indexes); portal's 0006 removes the models from its state and runs before this one.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = []

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="SimulatedFailure",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("mode", models.CharField(choices=[("never_ready", "never becomes ready"), ("stuck_finalizer", "finalizer never clears"), ("apply_error", "apply fails (retryable)"), ("degraded", "reports a failure")], max_length=30)),
                        ("api_version", models.CharField(blank=True, default="", max_length=200)),
                        ("kind", models.CharField(blank=True, default="", max_length=100)),
                        ("namespace", models.CharField(blank=True, default="", max_length=253)),
                        ("name", models.CharField(blank=True, default="", max_length=253)),
                        ("remaining", models.PositiveIntegerField(blank=True, help_text="How many more times it fires; empty means always.", null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        "db_table": "portal_simulatedfailure",
                        "ordering": ["id"],
                    },
                ),
                migrations.CreateModel(
                    name="SimulatedObject",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("api_version", models.CharField(max_length=200)),
                        ("kind", models.CharField(max_length=100)),
                        ("namespace", models.CharField(blank=True, default="", max_length=253)),
                        ("name", models.CharField(max_length=253)),
                        ("uid", models.UUIDField(unique=True)),
                        ("manifest", models.JSONField(default=dict)),
                        ("status", models.JSONField(blank=True, default=dict)),
                        ("labels", models.JSONField(blank=True, default=dict)),
                        ("finalizers", models.JSONField(blank=True, default=list)),
                        ("generation", models.PositiveIntegerField(default=1)),
                        ("resource_version", models.PositiveBigIntegerField(default=1)),
                        ("field_manager", models.CharField(default="kiln", max_length=100)),
                        ("failure", models.CharField(blank=True, default="", max_length=30)),
                        ("created_at", models.DateTimeField()),
                        ("updated_at", models.DateTimeField()),
                        ("ready_at", models.DateTimeField(blank=True, null=True)),
                        ("deletion_timestamp", models.DateTimeField(blank=True, null=True)),
                        ("finalizers_clear_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "portal_simulatedobject",
                        "ordering": ["namespace", "name"],
                        "indexes": [models.Index(fields=["kind", "namespace"], name="portal_simobject_kind_ns")],
                        "constraints": [models.UniqueConstraint(fields=("api_version", "kind", "namespace", "name"), name="portal_simobject_key")],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
