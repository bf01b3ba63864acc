"""The listing change log (`artifact_listing_changes`) and the store of channel sets too large
for a token (`artifact_sync_channel_sets`), which let rounds apply view changes of any size
incrementally (PROTOCOL.md section 5, "View"; docs/protocol.md, "Wide views").

New, empty tables and their indexes, created in one short transaction: no existing table is
altered or locked, so it is safe on a populated database. Until they exist, rounds cannot recover
a token's view (or a large catch-up) and answer a view change with a reset, which is always
correct; readiness does not name them. Reversed, the tables are dropped.
"""

from django.db import migrations, models

import relaycore.db


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
                ("changed_at", models.DateTimeField(db_default=relaycore.db.TransactionNow())),
            ],
            options={"db_table": "artifact_listing_changes"},
        ),
        migrations.CreateModel(
            name="ChannelSet",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("community_id", models.BigIntegerField()),
                ("digest", models.BinaryField(max_length=16)),
                ("channels", models.BinaryField()),
                ("touched_at", models.DateTimeField(db_default=relaycore.db.TransactionNow())),
            ],
            options={
                "db_table": "artifact_sync_channel_sets",
                "indexes": [models.Index(fields=["touched_at"], name="channel_sets_touched")],
            },
        ),
        migrations.AddConstraint(
            model_name="channelset",
            constraint=models.UniqueConstraint(
                fields=("community_id", "digest"), name="channel_sets_digest_uniq"
            ),
        ),
        migrations.AddConstraint(
            model_name="listingchange",
            constraint=models.UniqueConstraint(
                fields=("community_id", "listing_version"), name="listing_changes_version_uniq"
            ),
        ),
    ]
