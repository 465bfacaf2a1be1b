# Every sleep of an environment, [asleep from, awake from], so what it spent counts the hours it
# ran; an environment asleep (or waking) now starts with its current sleep.
from django.db import migrations, models
from django.utils import timezone


def current_sleeps(apps, schema_editor):
    Environment = apps.get_model("portal", "Environment")
    asleep = Environment.objects.filter(status__in=("SLEEPING", "WAKING"), slept_at__isnull=False)
    now = timezone.now()
    for env in asleep.only("pk", "status", "slept_at", "wake_requested_at").iterator():
        # A sleep ends as its wake begins, so a wake that fails is not priced as asleep. A
        # waking one's began when it was asked for, or, asked while still falling asleep, as
        # soon as it was asleep; with no time on record, now.
        woke = None
        if env.status == "WAKING":
            asked = env.wake_requested_at
            woke = (max(asked, env.slept_at) if asked else now).isoformat()
        sleeps = [[env.slept_at.isoformat(), woke]]
        Environment.objects.filter(pk=env.pk).update(sleeps=sleeps)


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
