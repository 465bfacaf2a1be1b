"""Teams and memberships move from portal to kiln (identity), their tables and rows untouched.

State only: the tables keep their names (portal_team, portal_membership), so no
row is copied and every foreign key keeps pointing at the same table. The
content types follow, so admin history and permissions stay attached.
Order: portal creates the tables (0001..0004), this migration adopts them,
canary 0004 and portal 0005 repoint their foreign keys and portal 0005 lets go.
"""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MODELS = ("team", "membership")


def _relabel(apps, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not ContentType.objects.filter(app_label=new, model=model).exists():
            ContentType.objects.filter(app_label=old, model=model).update(app_label=new)


def content_types_to_kiln(apps, schema_editor):
    _relabel(apps, "portal", "kiln")


def content_types_to_portal(apps, schema_editor):
    _relabel(apps, "kiln", "portal")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("portal", "0004_membership_source"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="Team",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("slug", models.CharField(max_length=63, unique=True, validators=[django.core.validators.RegexValidator("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", "Use a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters.")])),
                        ("name", models.CharField(max_length=200)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        "db_table": "portal_team",
                        "ordering": ["slug"],
                    },
                ),
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("source", models.CharField(choices=[("claim", "token claim"), ("admin", "granted by a platform admin")], default="admin", max_length=5)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("team", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="kiln.team")),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "db_table": "portal_membership",
                        "constraints": [models.UniqueConstraint(fields=("user", "team"), name="portal_membership_unique")],
                    },
                ),
            ],
        ),
        migrations.RunPython(content_types_to_kiln, content_types_to_portal),
    ]
