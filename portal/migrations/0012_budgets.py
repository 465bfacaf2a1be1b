# Team budgets: the monthly amount, a month's raises, the thresholds told; a notification may be
# about a team as a whole (no environment).
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0011_sleep_wake"),
        ("kiln", "0001_teams"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="notification",
            name="environment",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="notifications",
                to="portal.environment",
            ),
        ),
        migrations.CreateModel(
            name="TeamBudget",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("monthly_amount", models.DecimalField(decimal_places=2, max_digits=12)),
                ("currency", models.CharField(max_length=3)),
                ("warn_percent", models.PositiveSmallIntegerField(default=80)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "team",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="budget",
                        to="kiln.team",
                    ),
                ),
            ],
            options={
                "ordering": ["team__slug"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(monthly_amount__gte=0),
                        name="portal_budget_amount_nonneg",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(warn_percent__gte=1) & models.Q(warn_percent__lte=100),
                        name="portal_budget_warn_percent_range",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="BudgetRaise",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("month", models.DateField()),
                ("amount", models.DecimalField(decimal_places=2, max_digits=12)),
                ("reason", models.TextField()),
                ("raised_by_name", models.CharField(max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "raised_by",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="budget_raises",
                        to="kiln.team",
                    ),
                ),
            ],
            options={
                "ordering": ["month", "id"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(amount__gt=0), name="portal_budget_raise_positive"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="BudgetNotice",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("month", models.DateField()),
                ("threshold", models.PositiveSmallIntegerField()),
                ("spend", models.DecimalField(decimal_places=2, max_digits=12)),
                ("forecast", models.DecimalField(decimal_places=2, max_digits=12)),
                ("budget", models.DecimalField(decimal_places=2, max_digits=12)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="budget_notices",
                        to="kiln.team",
                    ),
                ),
            ],
            options={
                "ordering": ["month", "threshold"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("team", "month", "threshold"), name="portal_budget_notice_once"
                    )
                ],
            },
        ),
    ]
