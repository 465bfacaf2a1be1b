# What an asleep environment still pays an hour: its database claim, which sleeping keeps. Set at
# request time from then on; an environment requested before is priced from its request, at the
# database prices of this migration (portal/services/cost.py's when it was written).
from decimal import Decimal

from django.db import migrations, models

DATABASE_HOURLY = {"small": Decimal("0.0360"), "medium": Decimal("0.1910"), "large": Decimal("1.0080")}
DATABASE_SIZE = {"ephemeral": "small", "dev": "small", "staging": "medium", "prod": "large"}


def kept_prices(apps, schema_editor):
    Environment = apps.get_model("portal", "Environment")
    with_database = Environment.objects.filter(request__database=True)
    for env_class in with_database.order_by().values_list("env_class", flat=True).distinct():
        price = DATABASE_HOURLY[DATABASE_SIZE.get(env_class, "small")]
        with_database.filter(env_class=env_class).update(asleep_hourly_cost=price)


class Migration(migrations.Migration):
    dependencies = [("portal", "0013_environment_sleeps")]

    operations = [
        migrations.AddField(
            model_name="environment",
            name="asleep_hourly_cost",
            field=models.DecimalField(decimal_places=4, default=0, max_digits=12),
        ),
        migrations.RunPython(kept_prices, migrations.RunPython.noop),
    ]
