"""Verify (or, on an empty table, build) idx_artifact_revisions_artifact.

On a populated database the index is built concurrently *before* this migration, outside any
transaction (`buzz-admin build-indexes`, or the CREATE INDEX CONCURRENTLY the refusal names):
a plain CREATE INDEX would block every writer of artifact_revisions for the whole build. This
migration then only checks the exact definition and the valid, ready and live flags, and records
itself. The index is not in Django's model state: its name is longer than Django's 30-character
index-name limit (artifacts/models.py names it in a comment).
"""

from django.db import migrations

from artifacts.migrations import _sync_steps
from artifacts.schema import MIGRATION_0076


def verify_or_build(apps, schema_editor):  # type: ignore[no-untyped-def]
    _sync_steps.verify_or_build_indexes(schema_editor.connection, MIGRATION_0076)


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    _sync_steps.drop_indexes(schema_editor.connection, MIGRATION_0076)


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0001_initial")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(verify_or_build, drop)],
            state_operations=[],
        )
    ]
