"""Append-only triggers on the witness cosignatures (audit/triggers.py holds the SQL)."""

from django.db import migrations

from audit import triggers


def create(apps, schema_editor):
    for sql in triggers.cosignature_statements(schema_editor.connection.vendor, create=True):
        schema_editor.execute(sql, params=None)


def drop(apps, schema_editor):
    for sql in triggers.cosignature_statements(schema_editor.connection.vendor, create=False):
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0009_cosignature")]

    operations = [migrations.RunPython(create, drop)]
