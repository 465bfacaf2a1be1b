# Placeholder filled by the change named in the file name; kept empty, it changes nothing.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("portal", "0011_sleep_wake")]

    operations = []
