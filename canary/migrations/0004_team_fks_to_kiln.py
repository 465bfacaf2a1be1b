"""Teams now belong to kiln (identity): the foreign keys to them point at kiln.Team.

State only: the table (portal_team) and its constraints are unchanged. Runs
before portal lets go of its Team model (portal 0005).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("canary", "0003_rollout_inconclusive"),
        ("kiln", "0001_teams"),
    ]

    run_before = [("portal", "0005_teams_to_kiln")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name="chaosexperiment",
                    name="team",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="chaos_experiments", to="kiln.team"),
                ),
                migrations.AlterField(
                    model_name="service",
                    name="team",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="canary_services", to="kiln.team"),
                ),
            ],
        ),
    ]
