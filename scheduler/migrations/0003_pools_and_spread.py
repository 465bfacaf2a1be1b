# Each node's pods per workload, for the extender's capacity-pool spread filter (scheduler/pools.py).
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0002_node_lifetimes_and_commitment")]

    operations = [
        migrations.AddField(
            model_name="node",
            name="workloads",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
