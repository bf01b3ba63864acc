# Interim version (naive builds); replaced by the production-safe verification migration.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0077_artifact_sync_timestamps")]

    operations = [
        migrations.AddIndex(
            model_name="artifacthead",
            index=models.Index(
                fields=["community", "modified_at", "artifact_id"], name="artifact_heads_modified"
            ),
        ),
        migrations.AddIndex(
            model_name="artifacthead",
            index=models.Index(
                fields=["community", "channel_id", "artifact_id"], name="artifact_heads_channel"
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
    ]
