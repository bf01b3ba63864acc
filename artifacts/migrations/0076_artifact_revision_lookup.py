# Interim version (naive build); replaced by the production-safe verification migration.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0001_initial")]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX IF NOT EXISTS idx_artifact_revisions_artifact "
            "ON artifact_revisions (community_id, artifact_id)",
            "DROP INDEX IF EXISTS idx_artifact_revisions_artifact",
        )
    ]
