"""The listing change log (`artifact_listing_changes`) that lets rounds apply view changes of
any size incrementally (PROTOCOL.md section 5, "View"; docs/protocol.md, "Wide views").

A new, empty table and its unique index, created in one short transaction: it locks no existing
table, so it is safe on a populated database. Until it exists, rounds cannot recover a token's
view and answer a view change with a reset (which is always correct); readiness does not name it.
Reversed, the table is dropped.
"""

from django.db import migrations, models

import artifacts.db


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0080_artifact_heads_replay_index")]

    operations = [
        migrations.CreateModel(
            name="ListingChange",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("community_id", models.BigIntegerField()),
                ("listing_version", models.BigIntegerField()),
                ("channel_id", models.UUIDField(blank=True, null=True)),
                ("readable_before", models.SmallIntegerField(
                    blank=True, choices=[(0, "Nobody"), (1, "Open"), (2, "Members")], null=True)),
                ("changed_at", models.DateTimeField(db_default=artifacts.db.TransactionNow())),
            ],
            options={"db_table": "artifact_listing_changes"},
        ),
        migrations.AddConstraint(
            model_name="listingchange",
            constraint=models.UniqueConstraint(
                fields=("community_id", "listing_version"), name="listing_changes_version_uniq"
            ),
        ),
    ]
