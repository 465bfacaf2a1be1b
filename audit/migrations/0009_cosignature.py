from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0008_chain_indexes_exact"),
    ]

    operations = [
        migrations.CreateModel(
            name="Cosignature",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("witness", models.CharField(max_length=200)),
                ("key_id", models.CharField(max_length=8)),
                ("timestamp", models.BigIntegerField()),
                ("line", models.TextField()),
                ("received_at", models.DateTimeField()),
                (
                    "checkpoint",
                    models.ForeignKey(
                        on_delete=models.deletion.PROTECT,
                        related_name="cosignatures",
                        to="audit.checkpoint",
                    ),
                ),
            ],
            options={
                "ordering": ["checkpoint_id", "witness"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("checkpoint", "witness"), name="audit_cosignature_one_per_witness"
                    )
                ],
            },
        ),
    ]
