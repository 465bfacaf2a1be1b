"""Objects of a tenant control plane's own API server beside the host cluster's: the `cluster`
column ("" for the host) and the object key widened to include it."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [("cluster", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="simulatedobject",
            name="cluster",
            field=models.CharField(blank=True, default="", max_length=507),
        ),
        migrations.RemoveConstraint(model_name="simulatedobject", name="portal_simobject_key"),
        migrations.AddConstraint(
            model_name="simulatedobject",
            constraint=models.UniqueConstraint(
                fields=("cluster", "api_version", "kind", "namespace", "name"),
                name="portal_simobject_key",
            ),
        ),
    ]
