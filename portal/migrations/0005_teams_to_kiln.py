"""Teams and memberships now belong to kiln (identity): repoint the foreign keys, let go of the models.

State only: kiln 0001 adopted the tables under their old names, so the
database keeps every row and every constraint as it is. canary 0004 repoints
its own foreign keys before this runs (its `run_before`).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("portal", "0004_membership_source"),
        ("kiln", "0001_teams"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name="environmentrequest",
                    name="team",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="environment_requests", to="kiln.team"),
                ),
                migrations.AlterField(
                    model_name="environment",
                    name="team",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="environments", to="kiln.team"),
                ),
                migrations.DeleteModel(name="Membership"),
                migrations.DeleteModel(name="Team"),
            ],
        ),
    ]
