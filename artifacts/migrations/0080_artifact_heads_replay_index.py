"""Verify (or, on an empty table, build) the WebSocket replay's index on `artifact_heads`.

`artifact_heads (community_id, channel_id, created_at DESC, event_id)` serves the replay's order
(newest head first within a channel), so a REQ with a limit reads that many heads per readable
channel instead of every head and a sort. Not a sync index: incremental reads and readiness do
not use it. Like 0078: on a populated database it is built concurrently before this migration
(`buzz-admin build-indexes`, or `buzz-admin migrate --build-indexes`); this migration checks its
definition and its valid, ready and live flags, or refuses and names the fix. Reversed, the
index is dropped (a catalog change).
"""

from django.db import migrations, models

from artifacts.migrations import _sync_steps
from artifacts.schema import MIGRATION_0080


def verify_or_build(apps, schema_editor):  # type: ignore[no-untyped-def]
    _sync_steps.verify_or_build_indexes(schema_editor.connection, MIGRATION_0080)


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    _sync_steps.drop_indexes(schema_editor.connection, MIGRATION_0080)


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0079_community_relay_information")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(verify_or_build, drop)],
            state_operations=[
                migrations.AddIndex(
                    model_name="artifacthead",
                    index=models.Index(
                        fields=["community", "channel_id", "-created_at", "event_id"],
                        name="artifact_heads_replay",
                    ),
                ),
            ],
        ),
    ]
