from django.db import migrations, models


def mark_token_memberships(apps, schema_editor):
    """Memberships of users born from a token (no usable password) came from its `team` claim."""
    Membership = apps.get_model("portal", "Membership")
    Membership.objects.filter(user__password__startswith="!").update(source="claim")


class Migration(migrations.Migration):

    dependencies = [
        ("portal", "0003_environments"),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="source",
            field=models.CharField(
                choices=[("claim", "token claim"), ("admin", "granted by a platform admin")],
                default="admin",
                max_length=5,
            ),
        ),
        migrations.RunPython(mark_token_memberships, migrations.RunPython.noop),
    ]
