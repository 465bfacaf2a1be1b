"""The chaos tables, moved from the canary app in Django's state only (no row touched).

The tables stay where canary's 0001_chaos created them (`Meta.db_table` keeps their
names); canary's 0005 removed the models from canary's state first. On a fresh
database canary's 0001 creates the tables and this migration only records them, so a
fresh database and an existing one reach the same schema. The content types of the
three models move with them, so permissions and admin log rows keep pointing at them.
"""

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MODELS = ("chaosexperiment", "chaoslease", "chaosinjection")


def _relabel(apps, old: str, new: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    taken = set(
        content_type.objects.filter(app_label=new, model__in=MODELS).values_list("model", flat=True)
    )
    # A content type already present under the new label is kept as it is (never deleted:
    # permissions and admin log rows may point at either); the old one stays beside it.
    content_type.objects.filter(app_label=old, model__in=set(MODELS) - taken).update(app_label=new)


def content_types_forward(apps, schema_editor) -> None:
    _relabel(apps, "canary", "chaos")


def content_types_backward(apps, schema_editor) -> None:
    _relabel(apps, "chaos", "canary")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("canary", "0005_chaos_moves_to_its_own_app"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("kiln", "0001_teams"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="ChaosExperiment",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("name", models.CharField(max_length=100)),
                        ("namespace", models.CharField(max_length=63)),
                        (
                            "selector",
                            models.JSONField(
                                default=dict, help_text="matchLabels of the target pods"
                            ),
                        ),
                        (
                            "service",
                            models.CharField(
                                blank=True,
                                default="",
                                help_text="host of the target service (HTTP faults)",
                                max_length=253,
                            ),
                        ),
                        (
                            "fault",
                            models.CharField(
                                choices=[
                                    ("pod-kill", "Pod kill"),
                                    ("http-delay", "HTTP delay"),
                                    ("http-abort", "HTTP abort"),
                                ],
                                max_length=16,
                            ),
                        ),
                        ("delay_ms", models.PositiveIntegerField(blank=True, null=True)),
                        (
                            "abort_http_status",
                            models.PositiveSmallIntegerField(blank=True, null=True),
                        ),
                        (
                            "percent",
                            models.FloatField(
                                default=100.0, help_text="share of requests faulted (HTTP faults)"
                            ),
                        ),
                        ("duration_seconds", models.PositiveIntegerField()),
                        (
                            "max_duration_seconds",
                            models.PositiveIntegerField(help_text="hard maximum, never exceeded"),
                        ),
                        ("max_pods", models.PositiveIntegerField(blank=True, null=True)),
                        ("max_percent", models.FloatField(blank=True, null=True)),
                        ("stop_conditions", models.JSONField(blank=True, default=list)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("pending", "Pending"),
                                    ("running", "Running"),
                                    ("completed", "Completed"),
                                    ("aborted", "Aborted"),
                                    ("expired", "Expired (hard maximum)"),
                                ],
                                default="pending",
                                max_length=16,
                            ),
                        ),
                        ("end_reason", models.CharField(blank=True, default="", max_length=300)),
                        ("lease_duration", models.FloatField()),
                        ("renew_deadline", models.FloatField()),
                        ("retry_period", models.FloatField()),
                        ("max_clock_skew", models.FloatField()),
                        ("revert_budget", models.FloatField()),
                        (
                            "created_by_name",
                            models.CharField(blank=True, default="", max_length=200),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("ended_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "created_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="chaos_experiments",
                                to="kiln.team",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "canary_chaosexperiment",
                        "ordering": ["-created_at"],
                    },
                ),
                migrations.CreateModel(
                    name="ChaosLease",
                    fields=[
                        (
                            "experiment",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                primary_key=True,
                                related_name="lease",
                                serialize=False,
                                to="chaos.chaosexperiment",
                            ),
                        ),
                        ("holder", models.CharField(blank=True, default="", max_length=200)),
                        ("resource_version", models.PositiveBigIntegerField(default=0)),
                        ("acquired_at", models.DateTimeField(blank=True, null=True)),
                        ("renewed_at", models.DateTimeField(blank=True, null=True)),
                        ("renewals", models.PositiveIntegerField(default=0)),
                        ("transitions", models.PositiveIntegerField(default=0)),
                    ],
                    options={
                        "db_table": "canary_chaoslease",
                    },
                ),
                migrations.CreateModel(
                    name="ChaosInjection",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("holder", models.CharField(max_length=200)),
                        ("fencing_token", models.PositiveBigIntegerField()),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("injecting", "Injecting"),
                                    ("active", "Active"),
                                    ("reverted", "Reverted"),
                                ],
                                default="injecting",
                                max_length=16,
                            ),
                        ),
                        (
                            "applied",
                            models.JSONField(default=list, help_text="refs of the objects applied"),
                        ),
                        (
                            "targets",
                            models.JSONField(default=list, help_text="pods or hosts affected"),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("injected_at", models.DateTimeField(blank=True, null=True)),
                        ("reverted_at", models.DateTimeField(blank=True, null=True)),
                        ("reverted_by", models.CharField(blank=True, default="", max_length=200)),
                        ("revert_reason", models.CharField(blank=True, default="", max_length=300)),
                        (
                            "experiment",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="injections",
                                to="chaos.chaosexperiment",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "canary_chaosinjection",
                        "ordering": ["created_at", "id"],
                    },
                ),
                migrations.AddIndex(
                    model_name="chaosexperiment",
                    index=models.Index(fields=["status"], name="canary_chaos_exp_status"),
                ),
                migrations.AddConstraint(
                    model_name="chaosexperiment",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("max_duration_seconds__gte", models.F("duration_seconds"))
                        ),
                        name="canary_chaos_exp_max_ge_duration",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="chaosexperiment",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("max_pods__isnull", False),
                            ("max_percent__isnull", False),
                            _connector="OR",
                        ),
                        name="canary_chaos_exp_blast_radius",
                    ),
                ),
                migrations.AddIndex(
                    model_name="chaosinjection",
                    index=models.Index(fields=["reverted_at"], name="canary_chaos_inj_reverted"),
                ),
                migrations.AddConstraint(
                    model_name="chaosinjection",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("reverted_at__isnull", True)),
                        fields=("experiment",),
                        name="canary_chaos_one_live_injection",
                    ),
                ),
            ],
        ),
        migrations.RunPython(content_types_forward, content_types_backward),
    ]
