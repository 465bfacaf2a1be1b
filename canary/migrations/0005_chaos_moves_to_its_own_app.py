"""Chaos becomes its own app (label `chaos`): its models leave canary's state, not the database.

SeparateDatabaseAndState with no database operations: the tables `canary_chaos*` and
every row in them stay; chaos's 0001 records the same tables under the new app.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("canary", "0004_team_fks_to_kiln")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name="ChaosInjection"),
                migrations.DeleteModel(name="ChaosLease"),
                migrations.DeleteModel(name="ChaosExperiment"),
            ],
        )
    ]
