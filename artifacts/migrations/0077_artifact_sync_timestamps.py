# Interim version; replaced by the production-safe, idempotent migration.
from django.db import migrations, models

import artifacts.db


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0076_artifact_revision_lookup")]

    operations = [
        migrations.AddField(
            model_name="artifacthead",
            name="modified_at",
            field=models.DateTimeField(db_default=artifacts.db.TransactionNow()),
        ),
        migrations.AddField(
            model_name="artifactrevision",
            name="modified_at",
            field=models.DateTimeField(db_default=artifacts.db.TransactionNow()),
        ),
        migrations.AddField(
            model_name="artifactrevision",
            name="source_channel_id",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="channelmember",
            name="sync_modified_at",
            field=models.DateTimeField(db_default=artifacts.db.TransactionNow()),
        ),
        migrations.AddField(
            model_name="community",
            name="artifact_policy_modified_at",
            field=models.DateTimeField(db_default=artifacts.db.TransactionNow()),
        ),
    ]
