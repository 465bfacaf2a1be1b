# Placeholder filled by the change named in the file name; kept empty, it changes nothing.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("portal", "0010_environment_previous_version_index")]

    operations = []
