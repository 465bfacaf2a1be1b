"""The Chaos Mesh fault kinds (and their magnitude, `params`) and verified reverts (what each
revert read back, whether it confirmed the fault gone, and the state a person must look at)."""

from django.db import migrations, models

FAULT_CHOICES = [
    ("pod-kill", "Pod kill"),
    ("http-delay", "HTTP delay"),
    ("http-abort", "HTTP abort"),
    ("network-delay", "Network delay"),
    ("network-loss", "Network packet loss"),
    ("network-partition", "Network partition"),
    ("cpu-stress", "CPU stress"),
    ("memory-stress", "Memory stress"),
    ("dns-error", "DNS errors"),
    ("clock-skew", "Clock skew"),
]

INJECTION_STATES = [
    ("injecting", "Injecting"),
    ("active", "Active"),
    ("reverted", "Reverted"),
    ("unconfirmed", "Revert unconfirmed"),
]


class Migration(migrations.Migration):
    dependencies = [("chaos", "0002_levers_overlaps")]

    operations = [
        migrations.AlterField(
            model_name="chaosexperiment",
            name="fault",
            field=models.CharField(choices=FAULT_CHOICES, max_length=24),
        ),
        migrations.AddField(
            model_name="chaosexperiment",
            name="params",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="magnitude of a Chaos Mesh fault (canary/chaos/kinds.py)",
            ),
        ),
        migrations.AlterField(
            model_name="chaosinjection",
            name="state",
            field=models.CharField(choices=INJECTION_STATES, default="injecting", max_length=16),
        ),
        migrations.AddField(
            model_name="chaosinjection",
            name="revert_confirmed",
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="chaosinjection",
            name="revert_attempts",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="chaosinjection",
            name="revert_evidence",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="chaosinjection",
            name="confirmed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
