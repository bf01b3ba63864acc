"""Add the five sync columns without rewriting a table; idempotent.

One transaction under short lock and statement budgets (artifacts.schema): each missing column is
added with a constant default (the epoch for the stamps, which PostgreSQL keeps in the catalog:
existing rows read it, nothing is rewritten or backfilled), then the stamps' defaults become
exactly `now()`. Columns that already have the expected shape (0077 applied by hand, or applied
before) get no statement at all, so re-applying changes nothing. Django's state gets the fields
as artifacts/models.py declares them (`db_default=TransactionNow()`, which compiles to `now()`).
"""

from django.db import migrations, models

import relaycore.db
from artifacts.migrations import _sync_steps


def add_columns(apps, schema_editor):  # type: ignore[no-untyped-def]
    _sync_steps.apply_sync_columns(schema_editor.connection)


def drop_columns(apps, schema_editor):  # type: ignore[no-untyped-def]
    _sync_steps.drop_sync_columns(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0076_artifact_revision_lookup")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(add_columns, drop_columns)],
            state_operations=[
                migrations.AddField(
                    model_name="artifacthead",
                    name="modified_at",
                    field=models.DateTimeField(db_default=relaycore.db.TransactionNow()),
                ),
                migrations.AddField(
                    model_name="artifactrevision",
                    name="modified_at",
                    field=models.DateTimeField(db_default=relaycore.db.TransactionNow()),
                ),
                migrations.AddField(
                    model_name="artifactrevision",
                    name="source_channel_id",
                    field=models.UUIDField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="channelmember",
                    name="sync_modified_at",
                    field=models.DateTimeField(db_default=relaycore.db.TransactionNow()),
                ),
                migrations.AddField(
                    model_name="community",
                    name="artifact_policy_modified_at",
                    field=models.DateTimeField(db_default=relaycore.db.TransactionNow()),
                ),
            ],
        )
    ]
