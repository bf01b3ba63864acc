"""Verify (or, on empty tables, build) the four sync indexes on the 0077 columns.

Like 0076: on a populated database the indexes are built concurrently before this migration
(`buzz-admin build-indexes`); this migration checks each definition and its valid, ready and
live flags and records itself, or refuses and names the fix (an invalid index is dropped
concurrently first, then built again). Django's state gets the indexes as artifacts/models.py
declares them.
"""

from django.db import migrations, models

from artifacts.migrations import _sync_steps
from artifacts.schema import MIGRATION_0078


def verify_or_build(apps, schema_editor):  # type: ignore[no-untyped-def]
    _sync_steps.verify_or_build_indexes(schema_editor.connection, MIGRATION_0078)


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    _sync_steps.drop_indexes(schema_editor.connection, MIGRATION_0078)


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0077_artifact_sync_timestamps")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(verify_or_build, drop)],
            state_operations=[
                migrations.AddIndex(
                    model_name="artifacthead",
                    index=models.Index(
                        fields=["community", "modified_at", "artifact_id"],
                        name="artifact_heads_modified",
                    ),
                ),
                migrations.AddIndex(
                    model_name="artifacthead",
                    index=models.Index(
                        fields=["community", "channel_id", "artifact_id"],
                        name="artifact_heads_channel",
                    ),
                ),
                migrations.AddIndex(
                    model_name="artifactrevision",
                    index=models.Index(
                        condition=models.Q(source_channel_id__isnull=False),
                        fields=["community", "modified_at", "event_id"],
                        name="artifact_revisions_moves",
                    ),
                ),
                migrations.AddIndex(
                    model_name="channelmember",
                    index=models.Index(
                        fields=["community", "pubkey", "sync_modified_at", "channel_id"],
                        name="channel_members_sync",
                    ),
                ),
            ],
        )
    ]
