"""SimulatedObject and SimulatedFailure now belong to the `cluster` app (kiln/cluster).

State only: the tables keep their names and rows; `cluster.0001_initial` takes
the models over. `run_before` puts the order here, so kiln's migrations name no app.
Their content types follow (permissions and admin history stay attached).
"""

from django.db import migrations

MODELS = ("simulatedobject", "simulatedfailure")


def _relabel(apps, old: str, new: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not content_type.objects.filter(app_label=new, model=model).exists():
            content_type.objects.filter(app_label=old, model=model).update(app_label=new)


def forwards(apps, schema_editor) -> None:
    _relabel(apps, "portal", "cluster")


def backwards(apps, schema_editor) -> None:
    _relabel(apps, "cluster", "portal")


class Migration(migrations.Migration):

    dependencies = [
        ("portal", "0005_teams_to_kiln"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    run_before = [
        ("cluster", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="SimulatedFailure"),
                migrations.DeleteModel(name="SimulatedObject"),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
