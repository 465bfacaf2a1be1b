# Every sleep of an environment, [asleep from, awake from], so what it spent counts the hours it
# ran; an environment asleep (or waking) now starts with its current sleep.
from django.db import migrations, models


def current_sleeps(apps, schema_editor):
    Environment = apps.get_model("portal", "Environment")
    # Waking too: it still has the time it fell asleep, and its sleep ends as its wake does.
    asleep = Environment.objects.filter(status__in=("SLEEPING", "WAKING"), slept_at__isnull=False)
    for env in asleep.only("pk", "slept_at").iterator():
        Environment.objects.filter(pk=env.pk).update(sleeps=[[env.slept_at.isoformat(), None]])


class Migration(migrations.Migration):
    dependencies = [("portal", "0012_budgets")]

    operations = [
        migrations.AddField(
            model_name="environment",
            name="sleeps",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(current_sleeps, migrations.RunPython.noop),
    ]
