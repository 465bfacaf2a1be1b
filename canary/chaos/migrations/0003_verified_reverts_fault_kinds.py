# Placeholder filled by the change named in the file name; kept empty, it changes nothing.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("chaos", "0002_levers_overlaps")]

    operations = []
