# Placeholder filled by the change named in the file name; kept empty, it changes nothing.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0002_node_lifetimes_and_commitment")]

    operations = []
